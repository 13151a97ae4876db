"""Network factories shared by sites and server: one name -> one architecture, built the same everywhere."""

from fl_contract.models.registry import build_model, load_numpy_params, model_names, state_dict_to_numpy

__all__ = ["build_model", "model_names", "state_dict_to_numpy", "load_numpy_params"]
