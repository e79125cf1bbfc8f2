"""The protocol's stages, one module each: request, reply, client step, checks, codec.

========================  ==========================================================
module                    stage
========================  ==========================================================
:mod:`.upload`            ``upload``: summaries (and statistics) in
:mod:`.reference`         the server's reference step (no message of its own: the
                          reference travels with a client's next request)
:mod:`.updates`           ``updates`` and ``refit``: local heads (O-FedAvg)
:mod:`.validation`        ``validation``: candidate heads out, counts back
:mod:`.screening`         ``screening``: leave-one-client-out heads out, paired counts back
:mod:`.evaluation`        ``evaluation``: the global head out, test counts back
========================  ==========================================================

:data:`STAGES` maps each exchange's name to its :class:`Stage`: the
transports read it (the in-process transport calls ``answer``, the Flower
transport and ``ClientApp`` the codec), so adding a stage touches its own
module, this table and the driver's stage list.
"""

from __future__ import annotations

from . import evaluation, screening, updates, upload, validation
from ._stage import ClientWire, ServerWire, Stage

__all__ = ["STAGES", "ClientWire", "ServerWire", "Stage"]

#: Every exchange a run may hold, by name, in the order they first occur (after a
#: screening excludes a client, "updates" and "validation" may run again).
STAGES: dict[str, Stage] = {
    stage.name: stage
    for stage in (
        upload.STAGE,
        updates.STAGE,
        validation.STAGE,
        screening.STAGE,
        updates.REFIT,
        evaluation.STAGE,
    )
}
