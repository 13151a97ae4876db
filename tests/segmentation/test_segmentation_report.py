"""`fl-seg-report`: a downloaded result becomes a Dice-per-site-per-round table and plot."""

from __future__ import annotations

import json

from reports.segmentation import dice_table, main


def _metrics(mean: float) -> dict[str, float]:
    return {"val_dice_tc": mean - 0.1, "val_dice_wt": mean + 0.1, "val_dice_et": mean, "val_dice_mean": mean,
            "train_loss": 0.5}


RESULTS = {
    "rounds": [
        {"round": 1, "sites": {"b": {"num_samples": 2, "metrics": _metrics(0.2)},
                               "a": {"num_samples": 3, "metrics": _metrics(0.1)}},
         "selection": {"metric": "val_dice_mean", "value": 0.14, "model_round": 0}},
        {"round": 2, "sites": {"a": {"num_samples": 3, "metrics": _metrics(0.4)}},
         "selection": {"metric": "val_dice_mean", "value": 0.4, "model_round": 1}},
    ],
    "final_validation": {"model_round": 2, "sites": {"a": _metrics(0.6), "b": _metrics(0.5)},
                         "selection": {"metric": "val_dice_mean", "value": 0.56, "model_round": 2}},
    "best_model": {"metric": "val_dice_mean", "value": 0.56, "model_round": 2, "file": "best_global_model.pt"},
    "test": {"model_round": 2, "no_result": [],
             "sites": {"a": {"test_dice_tc": 0.5, "test_dice_wt": 0.7, "test_dice_et": 0.6, "test_dice_mean": 0.6,
                             "test_hd95_mean": 12.25, "test_lesion_dice_mean": 0.55, "test_lesion_hd95_mean": 30.0,
                             "test_cases": 2.0}},
             "federation": {"metric": "test_dice_mean", "weight": "test_cases", "value": 0.6}},
}


def test_table_places_each_sites_dice_at_the_model_round_it_scored():
    table = dice_table(RESULTS)

    assert sorted(table) == [0, 1, 2]
    assert table[0]["a"]["mean"] == 0.1 and table[2]["b"]["wt"] == 0.6
    assert "b" not in table[1]  # no result from b in round 2


def test_command_writes_markdown_and_png(tmp_path):
    (tmp_path / "job" / "workspace" / "app_server").mkdir(parents=True)
    (tmp_path / "job" / "workspace" / "app_server" / "results.json").write_text(json.dumps(RESULTS))

    assert main([str(tmp_path / "job"), "--out", str(tmp_path / "report")]) == 0

    text = (tmp_path / "report" / "dice.md").read_text()
    assert "| 1 | 0.400 | - | 0.400 |" in text and "| b | 0.400 | 0.600 | 0.500 | 0.500 |" in text
    assert "| a | 2 | 0.500 | 0.700 | 0.600 | 0.600 | 12.2 | 0.550 | 30.0 |" in text and "test_cases): 0.600." in text
    assert (tmp_path / "report" / "dice.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
