"""Data sets and the paper's federated partition protocol."""

from ._loaders import DomainDataset, load_npz, load_office_caltech10
from ._partition import FederatedPartition, dirichlet_partition
from ._synthetic import FederatedDataset, make_federated_classification

__all__ = [
    "DomainDataset",
    "FederatedDataset",
    "FederatedPartition",
    "dirichlet_partition",
    "load_npz",
    "load_office_caltech10",
    "make_federated_classification",
]
