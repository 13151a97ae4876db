"""FedKT-CSD release bias with noisy counts: the released class covariance and mean against the noise-free ones.

    .venv/bin/python bench/fedkt_release_bias.py [--draws 2000 --dim 8 --write-readme]

One class of n records (d-dimensional latents, per-coordinate std 9, clipped at R = 34; once with mean 0 and once
with a mean of norm 15), its exact statistics, and `--draws` independent DP noise draws of the job's release
(epsilon 10, delta 1e-5, analytic calibration, count multiplier 5). For each draw the server's moment estimates
(before the PSD projection, which is a deliberate, biased step of its own) are compared with the noise-free
population covariance and mean: the relative bias of the covariance's mean diagonal and (for the class with a
mean) of the released mean along the true one, mu_hat . mu / ||mu||^2 - 1. Estimators:

- `plug-in, all draws`: the old estimator (the noisy count treated as exact) over every draw, as issue 25 measured;
- `plug-in, released`: the same over the draws whose noisy count reached `min_count` (10), the only ones the
  server releases;
- `corrected, released`: `moment_estimates` with the count correction (`server_app.privacy.noisy_counts`).

+- is one Monte Carlo standard error. All estimators see the same noise draws (one seed per row).
"""

from __future__ import annotations

import argparse

import numpy as np
from readme_section import write_section

from fl_contract.fedkt_csd.wire import ClassStatistics, upper_triangle
from jobs.fedkt_csd.spec import FedKTCSDParams
from server_app.fedkt_release import add_noise, moment_estimates
from server_app.privacy.dp_calibration import calibrate_noise

R, EPSILON, DELTA, SPREAD = 34.0, 10.0, 1e-5, 9.0
SIZES = (15, 20, 50, 200)
MIN_COUNT = FedKTCSDParams().min_count


def one_class(n: int, dim: int, mean_norm: float, draws: int,
              seed: int = 0) -> tuple[ClassStatistics, np.ndarray, np.ndarray]:
    """n clipped latents: their exact statistics repeated `draws` times (each copy gets its own noise when
    released as one class of many), population covariance and mean."""
    rng = np.random.default_rng(seed)
    direction = rng.normal(size=dim)
    z = mean_norm * direction / np.linalg.norm(direction) + SPREAD * rng.normal(size=(n, dim))
    z *= np.minimum(1.0, R / np.linalg.norm(z, axis=1, keepdims=True))
    stats = ClassStatistics(np.repeat(z.sum(axis=0)[None], draws, axis=0),
                            np.repeat(upper_triangle(z.T @ z)[None], draws, axis=0), np.full(draws, float(n)))
    return stats, np.cov(z.T, bias=True), z.mean(axis=0)


def relative_biases(n: int, dim: int, mean_norm: float, adjacency: str,
                    draws: int) -> dict[str, dict[str, tuple[float, float]]]:
    """Per estimator: {"covariance", "mean"}: (mean, standard error) over draws of the relative bias."""
    stats, covariance, mean = one_class(n, dim, mean_norm, draws)
    calibration = calibrate_noise(EPSILON, DELTA, R, adjacency)  # type: ignore[arg-type]
    noisy = add_noise(stats, calibration, seed=n)
    everything, released = np.arange(draws), np.flatnonzero(noisy.counts >= MIN_COUNT)
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for name, std_count, rows in (("plug-in, all draws", None, everything), ("plug-in, released", None, released),
                                  ("corrected, released", calibration.std_count, released)):
        _, means, covariances = moment_estimates(noisy, rows, calibration.std_mean, std_count=std_count,
                                                 min_count=MIN_COUNT)
        trace = np.diagonal(covariances, axis1=1, axis2=2).sum(axis=1)
        along = means @ mean / (mean @ mean) - 1.0 if mean_norm > 0 else np.full(len(rows), np.nan)
        out[name] = {"covariance": _mean_se(trace / np.trace(covariance) - 1.0), "mean": _mean_se(along)}
    out["released share"] = {"covariance": (released.size / draws, 0.0)}
    return out


def _mean_se(values: np.ndarray) -> tuple[float, float]:
    if np.isnan(values).all():
        return np.nan, np.nan
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(values.size))


def table(draws: int, dim: int) -> str:
    columns = ("plug-in, all draws", "plug-in, released", "corrected, released")
    lines = [f"| adjacency | class mean norm | n | released draws | {' | '.join(columns)} | mean: plug-in, released | "
             "mean: corrected, released |", "|---|---|---|---|" + "---|" * (len(columns) + 2)]
    for adjacency in ("add_remove", "replace_one"):
        for mean_norm in (0.0, 15.0):
            for n in SIZES:
                result = relative_biases(n, dim, mean_norm, adjacency, draws)
                cells = [_cell(result[c]["covariance"]) for c in columns]
                cells += [_cell(result[c]["mean"]) if mean_norm > 0 else "-"
                          for c in ("plug-in, released", "corrected, released")]
                lines.append(f"| {adjacency} | {mean_norm:g} | {n} | "
                             f"{100 * result['released share']['covariance'][0]:.1f}% | {' | '.join(cells)} |")
                print(lines[-1], flush=True)
    return "\n".join(lines)


def _cell(value: tuple[float, float]) -> str:
    return f"{100 * value[0]:+.2f}% +- {100 * value[1]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args()
    text = table(args.draws, args.dim)
    header = (f"d = {args.dim}, R = {R:g}, per-coordinate spread {SPREAD:g}, epsilon {EPSILON:g}, {args.draws} noise "
              f"draws per row, min_count {MIN_COUNT:g}; relative bias of the covariance's trace and (mean columns) of "
              "the released mean along the true one, +- one Monte Carlo standard error.\n\n")
    if args.write_readme:
        write_section("fedkt_release_bias", header + text)


if __name__ == "__main__":
    main()
