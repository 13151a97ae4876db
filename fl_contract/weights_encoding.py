"""How model weights travel between the server and the sites: the job parameter and the encoding itself.

With `weights_encoding="float16"` the server sends every model cast to float16 (half the bytes of float32), and a
site answers its training task with the float16 *difference* between the weights it trained and the weights it
received (decoded to float32). The server adds that difference to the float32 global model it sent, so the
global model stays float32 and each round's rounding is never carried into the next: a site's update reaches the
server as `g + (trained - float16(g))`, off from a float32 round only by where training started (at most half a
float16 step of each weight away) and by the difference's own rounding (half a float16 step of each entry of the
difference, a relative 2^-11 of an already small number). Weights would not do: float16 keeps 11 significant bits,
so a weight rounded each round would lose every update smaller than 2^-11 of itself.

Refused, naming the parameter: a value float16 cannot hold (beyond +-65504, NaN, infinite), an array that does not
arrive in the job's encoding, an update with a name or a shape the server did not send. `float32` (the default)
changes nothing: the arrays travel as they are. Only floating-point arrays are encoded; others travel as they are.

Secure aggregation is not combined with float16: a masked update is already a vector of fixed-point integers on
the ring Z/2^64, whatever the weights' dtype, so the job refuses the pair when it is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fl_contract.params import JobParams, ParameterError, param

FLOAT32 = "float32"
FLOAT16 = "float16"
WEIGHTS_ENCODINGS = (FLOAT32, FLOAT16)
FLOAT16_MAX = float(np.finfo(np.float16).max)

Arrays = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class WeightsEncodingParams(JobParams):
    """The parameter of every kind that sends weights: the dtype the weights cross the wire in."""

    weights_encoding: str = param(FLOAT32, "float32 (as trained) or float16: the server sends every model in "
                                           "float16 and each site its update as a float16 difference from the model "
                                           "it received, half the bytes each way; the server's global model stays "
                                           "float32", choices=WEIGHTS_ENCODINGS)

    def check(self) -> None:
        super().check()
        if self.weights_encoding != FLOAT32 and getattr(self, "secure_aggregation", False):
            raise ParameterError(f"weights_encoding={self.weights_encoding!r} cannot be combined with "
                                 "secure_aggregation: a masked update is a vector of fixed-point integers on the ring "
                                 "Z/2^64 whatever the weights' dtype; keep weights_encoding='float32' or turn "
                                 "secure_aggregation off")


def encoding_of(params: object) -> str:
    """The job's `weights_encoding`, or float32 for a kind without the parameter (it sends no weights)."""
    return params.weights_encoding if isinstance(params, WeightsEncodingParams) else FLOAT32


class WeightsEncodingError(ValueError):
    """Weights that cannot be encoded or decoded; the message names the parameter and what to do."""


def encode_model(params: Arrays, encoding: str) -> dict[str, np.ndarray]:
    """The model as the server sends it: each floating array cast to `encoding`. Raises WeightsEncodingError naming
    a parameter float16 cannot hold."""
    if encoding == FLOAT32:
        return dict(params)
    return {name: _narrowed(name, value, "weight") for name, value in params.items()}


def decode_model(params: Arrays, encoding: str) -> dict[str, np.ndarray]:
    """The model a site received, as float32 to load and train. Raises WeightsEncodingError naming a parameter that
    did not arrive in the job's encoding or is not finite."""
    if encoding == FLOAT32:
        return dict(params)
    return {name: _widened(name, value, encoding) if _floating(value) else value for name, value in params.items()}


def encode_update(received: Arrays, trained: Arrays, encoding: str) -> dict[str, np.ndarray]:
    """A site's training answer: the weights trained, or with float16 their difference from the (decoded) weights
    `received`. Raises WeightsEncodingError naming a parameter the server did not send, of another shape, or whose
    difference is not finite or beyond float16's range."""
    if encoding == FLOAT32:
        return dict(trained)
    update = {}
    for name, value in trained.items():
        array = np.asarray(value)
        if not _floating(array):
            update[name] = array
            continue
        base = _sent(name, array, received)
        update[name] = _narrowed(name, array.astype(np.float64) - base.astype(np.float64), "difference")
    return update


def decode_update(sent: Arrays, update: Arrays, encoding: str) -> dict[str, np.ndarray]:
    """A site's trained weights on the server: with float16, the global values `sent` (before encoding) plus the
    site's difference, in the dtype of `sent`. Raises WeightsEncodingError naming a parameter the server did not
    send, of another shape or dtype, or not finite."""
    if encoding == FLOAT32:
        return dict(update)
    decoded = {}
    for name, value in update.items():
        array = np.asarray(value)
        base = _sent(name, array, sent)
        if not _floating(base):
            decoded[name] = array
            continue
        difference = _widened(name, array, encoding)
        decoded[name] = (base.astype(np.float64) + difference.astype(np.float64)).astype(base.dtype)
    return decoded


def _floating(value: np.ndarray) -> bool:
    return bool(np.issubdtype(np.asarray(value).dtype, np.floating))


def _narrowed(name: str, value: np.ndarray, what: str) -> np.ndarray:
    array = np.asarray(value)
    if not _floating(array):
        return array
    if not np.all(np.isfinite(array)):
        raise WeightsEncodingError(f"parameter {name!r}: the {what} holds NaN or infinite values")
    largest = float(np.max(np.abs(array))) if array.size else 0.0
    if largest > FLOAT16_MAX:
        raise WeightsEncodingError(f"parameter {name!r}: a {what} of {largest:.4g} is beyond float16's range "
                                   f"(+-{FLOAT16_MAX:g}); run the job with weights_encoding='float32'")
    return array.astype(np.float16)


def _widened(name: str, value: np.ndarray, encoding: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype != np.dtype(encoding):
        raise WeightsEncodingError(f"parameter {name!r} arrived as {array.dtype}, but the job's weights_encoding is "
                                   f"{encoding!r}: both sides must run the same job parameters")
    if not np.all(np.isfinite(array)):
        raise WeightsEncodingError(f"parameter {name!r} arrived with NaN or infinite values")
    return array.astype(np.float32)


def _sent(name: str, value: np.ndarray, sent: Arrays) -> np.ndarray:
    if name not in sent:
        raise WeightsEncodingError(f"parameter {name!r} was not sent by the server this round")
    base = np.asarray(sent[name])
    if value.shape != base.shape:
        raise WeightsEncodingError(f"parameter {name!r} has shape {value.shape}, the server sent {base.shape}")
    return base
