"""What an admin or researcher renders from a downloaded `results.json`: pages, tables and plots. Nothing here runs
in a kit's server or site process (matplotlib and the page writers stay out of the runtime); it reads only what
the server recorded.

- `segmentation` (`fl-seg-report`): a segmentation run's Dice per site and round, test scores, cross-site table.
- `evaluation_cli` (`fl-eval-report`): an evaluation's page, `evaluation` (brats-evaluation), `isic_evaluation`,
  `cross_site` (a training run's matrix), all through `html_page`.
- `playerfl` (`playerfl-report`): tables, ranks and plots over several PLayer-FL runs.
"""
