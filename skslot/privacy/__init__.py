"""Differential privacy: a client's budget, its release plan, and the mechanisms it releases by.

Everything a private client adds noise with or charges a budget for is here.

* The budget and its accountant: :class:`PrivacyBudget` (one run's
  ``(epsilon, delta)``, its clip norm and its split), :class:`PrivacyLedger`
  (what one client released under it), :class:`LifetimeBudget` (what all its
  runs released, on its own disk); the release plan as data
  (:data:`RELEASE_PLAN`: each release's name, stage and share) and the one
  calibrator (:func:`gaussian_noise_scale`, through dp-accounting).
* The private client (:mod:`skslot.privacy.client`): it answers through
  :func:`~skslot.privacy.client.private_answer`, around its stages' client
  steps, as Flower's ``LocalDpMod`` wraps a handler; a request outside its
  plan gets :func:`refusal`, and its rows enter as :func:`null_rows`.  Its
  upload's releases are :class:`~skslot.privacy.client.PrivateRelease`'s.
* The mechanisms: the summary's (:func:`private_summary`: clipped moments,
  the Gaussian mechanism, OAS shrinkage), and each head's release of a
  client's statistics (:func:`released_statistics`: FedCGS's class sums,
  counts and Gram matrix, FedPFT's class moments, O-FedAvg's local head by
  output perturbation), with their sensitivities.
* A head fitted in process on each client's released statistics:
  :class:`PrivateClassifier`.
* The server's side (:mod:`skslot.privacy.server`): the plan it announces,
  its check of a private client's shrinkage and its account of what each
  client spent.
"""

from ._accounting import (
    DEFAULT_SHARES,
    MAX_EPSILON,
    RELEASE_PLAN,
    RELEASES,
    PrivacyBudget,
    PrivacyBudgetExceeded,
    PrivacyLedger,
    Release,
    gaussian_noise_scale,
    releases_at,
)
from ._heads import PrivateClassifier, released_statistics, statistics_release_problem
from ._lifetime import LifetimeBudget, run_key
from ._plan import RequestRefused, null_rows, refusal
from ._statistics import (
    CLASS_COUNTS_SENSITIVITY,
    CLASS_MOMENTS_SENSITIVITY,
    CLASS_STATISTICS_SENSITIVITY,
    LOCAL_HEAD_SENSITIVITY,
    ClassMoments,
    private_class_counts,
    private_class_moments,
    private_class_statistics,
    private_local_head,
)
from ._summary import (
    SUMMARY_SENSITIVITY,
    PrivacyWarning,
    noise_seed,
    noisy_moments,
    private_covariance_problem,
    private_summary,
    psd_projection,
)

__all__ = [
    "CLASS_COUNTS_SENSITIVITY",
    "CLASS_MOMENTS_SENSITIVITY",
    "CLASS_STATISTICS_SENSITIVITY",
    "DEFAULT_SHARES",
    "LOCAL_HEAD_SENSITIVITY",
    "MAX_EPSILON",
    "RELEASES",
    "RELEASE_PLAN",
    "SUMMARY_SENSITIVITY",
    "ClassMoments",
    "LifetimeBudget",
    "PrivacyBudget",
    "PrivacyBudgetExceeded",
    "PrivacyLedger",
    "PrivacyWarning",
    "PrivateClassifier",
    "Release",
    "RequestRefused",
    "gaussian_noise_scale",
    "noise_seed",
    "noisy_moments",
    "null_rows",
    "private_class_counts",
    "private_class_moments",
    "private_class_statistics",
    "private_covariance_problem",
    "private_local_head",
    "private_summary",
    "psd_projection",
    "refusal",
    "released_statistics",
    "releases_at",
    "run_key",
    "statistics_release_problem",
]
