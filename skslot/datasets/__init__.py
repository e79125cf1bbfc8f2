"""Data sets and the paper's federated partition protocol."""

from ._synthetic import FederatedDataset, make_federated_classification

__all__ = ["FederatedDataset", "make_federated_classification"]
