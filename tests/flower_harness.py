"""An in-process Flower ``Grid`` that delivers messages to ``ClientApp`` handlers.

The server logic runs unchanged against it; each node has its own ``Context``
(node config, persistent state), and a per-node *fault* can drop or tamper
with that node's replies, which is how the fault tests play a client that
times out or turns hostile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

SERVER_NODE_ID = 1

#: fault(request, reply) -> the reply to deliver, or None to drop it
Fault = Callable[[Message, Message], Message | None]


class LocalGrid(Grid):
    def __init__(
        self,
        client_app: ClientApp,
        node_configs: dict[int, dict],
        run_config: dict,
        faults: dict[int, Fault] | None = None,
    ) -> None:
        self.client_app = client_app
        self.contexts = {
            node: Context(
                run_id=1, node_id=node, node_config=nc, state=RecordDict(), run_config=run_config
            )
            for node, nc in node_configs.items()
        }
        self.faults = faults or {}
        self.delivered: list[tuple[int, str]] = []
        self.messages: list[Message] = []
        self._pending: dict[str, Message] = {}
        # what Flower's runtime sets in a ServerApp process before calling main()
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, SERVER_NODE_ID, 1

    def set_run(self, run_id: int) -> None:  # pragma: no cover - not used by the apps
        pass

    @property
    def run(self):  # pragma: no cover
        raise NotImplementedError

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(
            content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl
        )

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def _deliver(self, message: Message) -> Message | None:
        node = message.metadata.dst_node_id
        self.delivered.append((node, message.metadata.message_type))
        self.messages.append(message)
        try:
            reply = self.client_app(message, self.contexts[node])
        except Exception as exc:  # what a SuperNode sends back when the app raises
            reply = Message(Error(code=0, reason=f"{type(exc).__name__}: {exc}"), reply_to=message)
        fault = self.faults.get(node)
        return fault(message, reply) if fault else reply

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for message in messages:
            reply = self._deliver(message)
            if reply is not None:
                ids.append(str(len(self._pending)))
                self._pending[ids[-1]] = reply
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._pending.pop(i) for i in message_ids if i in self._pending]

    def send_and_receive(self, messages, *, timeout=None):
        return self.pull_messages(self.push_messages(messages))
