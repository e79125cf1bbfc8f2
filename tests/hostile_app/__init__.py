"""A Flower ClientApp for the hostile-node deployment test (never shipped in skslot).

It runs skslot's own handlers and, on a node whose node config sets
``hostile``, replaces its upload's ``counts`` array with the crafted ``.npy``
of the attacker's review: a header declaring ``'shape': (True,)``, which once
crashed the ServerApp.
"""

import struct

from flwr.app import Array, ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from skslot.flower import client_app as honest
from skslot.flower import messages
from skslot.protocol.stages import upload as upload_stage

app = ClientApp()


def crafted_npy() -> bytes:
    header = b"{'descr': '<i8', 'fortran_order': False, 'shape': (True,), }"
    header += b" " * (-(11 + len(header)) % 16) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + b"\0" * 8


@app.query("upload")
def upload(message: Message, context: Context) -> Message:
    reply = honest.HANDLERS["query.upload"](message, context)
    if not context.node_config.get("hostile"):
        return reply
    record = reply.content.array_records[upload_stage.STATISTICS]
    arrays = dict(record.items())
    arrays["counts"] = Array(dtype="int64", shape=(1,), stype="numpy.ndarray", data=crafted_npy())
    content = RecordDict(
        {
            messages.CONFIG: reply.content.config_records[messages.CONFIG],
            upload_stage.STATISTICS: ArrayRecord(arrays),
        }
    )
    return Message(content, reply_to=message)


@app.evaluate("head")
def evaluate(message: Message, context: Context) -> Message:
    return honest.HANDLERS["evaluate.head"](message, context)
