"""Secure aggregation of model weights: the job parameters, and the fixed-point vector a site masks each round.

With `secure_aggregation` on, a site never sends its weights in the clear. Each round it sends, masked
(`fl_contract.secure_aggregation`), one vector on the ring Z/2^64 holding, per group of parameters the server
names (FedAvg: the whole model; PLayer-FL: each federated layer), its sample-weighted *difference* n * (w - g) from
the global model g it received, in fixed point, followed by n (0 for a group it does not send). The server learns
only the sums, divides each group's sum by its count and adds the result to g: exactly FedAvg's weighted mean
sum(n_i w_i) / sum(n_i), up to the quantum below. Differences, not weights, because the job's L2 bound then bounds
every entry (a weight has no natural bound) and the bound is the one client-side DP already clips to.

Fixed point: an entry x = n * d is sent as round(x * 2^FRACTION_BITS) in two's complement. Each site's rounding
errs by at most 2^-(FRACTION_BITS+1) per entry (while |x| < 2^(53-FRACTION_BITS) = 2^29, float64's exact range;
beyond it the error is float64's relative 2^-53), so the mean's error is at most s * 2^-(FRACTION_BITS+1) / N <=
2^-(FRACTION_BITS+1) = QUANTUM / 2 (s sites, N >= s samples). Overflow: a site checks ||d||_2 <= B (the job's
`update_l2_bound`, at most MAX_L2_BOUND) and n <= MAX_SAMPLES before masking, and the server refuses a sum whose
count exceeds MAX_SAMPLES; then every entry of the sum is at most MAX_SAMPLES * B * 2^FRACTION_BITS <=
2^24 * 2^14 * 2^24 = 2^62 in magnitude, inside the signed range (|x| < 2^63): the ring sum is the integer sum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fl_contract.params import JobParams, ParameterError, param
from fl_contract.ring import RING_DTYPE

FRACTION_BITS = 24
QUANTUM = 2.0**-FRACTION_BITS
MAX_SAMPLES = 2**24  # training samples behind one round's sum, all sites together
MAX_L2_BOUND = 2.0**14


@dataclass(frozen=True)
class SecureWeightsParams(JobParams):
    """The parameters of every kind that sends weights: whether they are masked, and the bound a site checks."""

    secure_aggregation: bool = param(False, "mask every site's update (Bonawitz et al. secure aggregation with "
                                            "dropout recovery): the server learns only the sum of the sites' "
                                            "sample-weighted updates; needs update_l2_bound and weighted_mean")
    update_l2_bound: float = param(0.0, "with secure_aggregation: the largest L2 norm of a site's weight difference "
                                        "(trained - received); a site whose update is longer leaves the round, "
                                        "named (the server cannot check a masked update)", low=0.0, high=MAX_L2_BOUND)

    def check(self) -> None:
        super().check()
        if not self.secure_aggregation:
            return
        if self.update_l2_bound <= 0:
            raise ParameterError("secure_aggregation needs update_l2_bound > 0: the sites check that bound before "
                                 "masking, since the server cannot look at a masked update")
        rule = getattr(self, "aggregation", "weighted_mean")
        if rule != "weighted_mean":
            raise ParameterError(f"aggregation={rule!r} cannot run on masked updates: the server sees only their sum, "
                                 "so only weighted_mean is possible with secure_aggregation")


class MaskedUpdateError(ValueError):
    """A site's update cannot be masked (the message says which parameter and why); it leaves the round."""


@dataclass(frozen=True)
class WeightGroups:
    """The vector's layout: groups of parameter names (in order) and each parameter's shape, as the server sent them.

    A group is averaged over the sites that sent it; its last entry in the vector is its sample count.
    """

    groups: tuple[tuple[str, ...], ...]
    shapes: Mapping[str, tuple[int, ...]]

    @classmethod
    def of(cls, groups: Sequence[Sequence[str]], params: Mapping[str, np.ndarray]) -> WeightGroups:
        """The layout for `groups` over `params` (the global values sent); ValueError unless the groups partition
        them exactly."""
        names = [name for group in groups for name in group]
        if sorted(names) != sorted(params) or len(set(names)) != len(names) or not all(groups):
            raise ValueError(f"the groups {[list(g) for g in groups]} do not partition the parameters sent "
                             f"({sorted(params)[:5]}...): refusing to mask")
        return cls(tuple(tuple(g) for g in groups), {name: tuple(np.shape(params[name])) for name in names})

    @property
    def length(self) -> int:
        return sum(int(np.prod(self.shapes[name])) for group in self.groups for name in group) + len(self.groups)

    def encode(self, received: Mapping[str, np.ndarray], trained: Mapping[str, np.ndarray], num_samples: int,
               l2_bound: float) -> np.ndarray:
        """The site's vector: per group it trained, n * (trained - received) in fixed point then n; zeros for a
        group it did not send. Raises MaskedUpdateError naming what fails the checks the server cannot make."""
        if not isinstance(num_samples, (int, np.integer)) or not 0 < num_samples <= MAX_SAMPLES:
            raise MaskedUpdateError(f"the number of training samples must be an integer from 1 to {MAX_SAMPLES}, "
                                    f"got {num_samples!r}")
        sent = [group for group in self.groups if any(name in trained for name in group)]
        for group in sent:
            missing = [name for name in group if name not in trained]
            if missing:
                raise MaskedUpdateError(f"the update sends part of a group: {missing} missing")
        extra = sorted(set(trained) - set(self.shapes))
        if extra:
            raise MaskedUpdateError(f"the update has parameters the server did not send: {extra[:5]}")
        deltas: dict[str, np.ndarray] = {}
        for name in (n for group in sent for n in group):
            value = np.asarray(trained[name])
            if value.shape != self.shapes[name]:
                raise MaskedUpdateError(f"parameter {name!r} has shape {value.shape}, expected {self.shapes[name]}")
            if not np.issubdtype(value.dtype, np.floating) or not np.all(np.isfinite(value)):
                raise MaskedUpdateError(f"parameter {name!r} is not finite floating point ({value.dtype})")
            deltas[name] = value.astype(np.float64) - np.asarray(received[name], dtype=np.float64)
        norm = float(np.sqrt(sum(float(np.sum(d * d)) for d in deltas.values())))
        if norm > l2_bound:
            raise MaskedUpdateError(f"the update's L2 norm {norm:.4g} exceeds the job's update_l2_bound {l2_bound:g} "
                                    "(raise the bound in the job, or lower the learning rate or local steps)")
        parts: list[np.ndarray] = []
        for group in self.groups:
            if group in sent:
                parts.extend(np.rint(deltas[name].ravel() * num_samples * 2.0**FRACTION_BITS) for name in group)
                parts.append(np.array([num_samples], dtype=np.float64))
            else:
                parts.append(np.zeros(sum(int(np.prod(self.shapes[n])) for n in group) + 1))
        return np.concatenate(parts).astype(np.int64).view(RING_DTYPE)

    def decode(self, total: np.ndarray) -> tuple[dict[str, np.ndarray], list[int]]:
        """(the sample-weighted mean difference of every group some site sent, float64; each group's count) from
        the unmasked sum. Raises ValueError when the sum cannot be a valid one (wrong length, wrapped count)."""
        if total.dtype != RING_DTYPE or total.shape != (self.length,):
            raise ValueError(f"the unmasked sum has {total.dtype} shape {total.shape}, expected ({self.length},)")
        signed = total.view(np.int64)
        means: dict[str, np.ndarray] = {}
        counts: list[int] = []
        offset = 0
        for group in self.groups:
            sizes = [int(np.prod(self.shapes[name])) for name in group]
            count = int(signed[offset + sum(sizes)])
            if not 0 <= count <= MAX_SAMPLES:
                raise ValueError(f"the sum's sample count for {group[0]}... is {count}, outside 0..{MAX_SAMPLES}: "
                                 "a site sent a malformed vector; refusing the round")
            for name, size in zip(group, sizes, strict=True):
                if count:
                    entries = signed[offset:offset + size].astype(np.float64)
                    means[name] = (entries * QUANTUM / count).reshape(self.shapes[name])
                offset += size
            offset += 1
            counts.append(count)
        return means, counts


TRAIN_TASK = "train"  # the round's training task: with secure_aggregation its answer is the site's keys
TASK_MASKED = "masked_update"  # the site's masked vector (`fl_contract.secure_aggregation_messages`)
GROUPS = "secure_groups"  # meta of the train task: the groups of parameter names the vector is laid out in
