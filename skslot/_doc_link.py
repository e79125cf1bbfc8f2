"""The "?" link of the estimators' HTML representation: their page on the docs site."""

from __future__ import annotations

import sys

#: Root of the documentation site (the API pages live under ``generated/``).
DOCS_URL = "https://skslot.readthedocs.io/en/stable/"


def _public_name(estimator: object) -> dict[str, str]:
    """``skslot.<Name>`` for top-level exports, else ``skslot.<subpackage>.<Name>``."""
    cls = type(estimator)
    package = sys.modules["skslot"]
    if cls.__name__ in getattr(package, "__all__", ()):
        return {"public_name": f"skslot.{cls.__name__}"}
    return {"public_name": ".".join([*cls.__module__.split(".")[:2], cls.__name__])}


class DocLinkMixin:
    """Points scikit-learn's HTML repr documentation link at skslot's API page."""

    _doc_link_module = "skslot"
    _doc_link_template = DOCS_URL + "generated/{public_name}.html"
    _doc_link_url_param_generator = _public_name
