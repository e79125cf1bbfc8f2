"""Data sets: the embedded ones, one's own tables, and the paper's federated partition."""

from ._embedded import (
    EMBEDDED_DATASETS,
    digits_projection,
    load_dataset,
    load_digits_effnet,
    load_office_caltech10,
)
from ._loaders import DomainDataset, load_npz
from ._partition import FederatedPartition, dirichlet_partition
from ._synthetic import FederatedDataset, make_federated_classification
from ._tables import FeatureTable, load_table

__all__ = [
    "EMBEDDED_DATASETS",
    "DomainDataset",
    "FeatureTable",
    "FederatedDataset",
    "FederatedPartition",
    "digits_projection",
    "dirichlet_partition",
    "load_dataset",
    "load_digits_effnet",
    "load_npz",
    "load_office_caltech10",
    "load_table",
    "make_federated_classification",
]
