"""Runtime parameters (rabbitmq.com/parameters.html): which component owns a parameter and
where setting or clearing one goes. `shovel` belongs to the dynamic shovels,
`federation-upstream` and `federation-upstream-set` to federation, `operator_policy` to the
vhost's operator policies (as RabbitMQ stores them); any other component is
unknown (RabbitMQ's 400 "component X not found" for a plugin that is not enabled).

Talked to by: the management API (/api/parameters), definitions import.
Must never: store a parameter its component refuses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from broker.federation.supervisor import COMPONENTS as FEDERATION
from broker.policies import OPERATOR_COMPONENT
from broker.shovel.supervisor import COMPONENT as SHOVEL

if TYPE_CHECKING:
    from broker.federation.supervisor import Federation
    from broker.shovel.supervisor import Shovels
    from broker.vhost import VHost


class Owners(Protocol):
    """Where parameters go: the broker's shovels and federation (broker.server.Broker)."""

    @property
    def shovels(self) -> Shovels: ...

    @property
    def federation(self) -> Federation: ...

    @property
    def vhosts(self) -> dict[str, VHost]: ...  # name -> vhost (operator policies)


COMPONENTS = (SHOVEL, *FEDERATION, OPERATOR_COMPONENT)


def set_parameter(broker: Owners, vhost: str, component: str, name: str, value: Any) -> list[str]:
    """Validate, store and apply; the validation errors (empty when it was set).
    LookupError for an unknown component."""
    if component == SHOVEL:
        return broker.shovels.set(vhost, name, value)
    if component in FEDERATION:
        return broker.federation.set(vhost, component, name, value)
    if component == OPERATOR_COMPONENT:  # RabbitMQ stores operator policies as parameters
        if not isinstance(value, dict):
            return ["operator policy value must be an object"]
        try:
            broker.vhosts[vhost].set_operator_policy(
                name, str(value.get("pattern", "")), value.get("definition", {}),  # {} fails validation as None did
                value.get("priority", 0), value.get("apply-to", "all"))
        except ValueError as exc:
            return [str(exc)]
        return []
    raise LookupError(f"component {component} not found")


def clear_parameter(broker: Owners, vhost: str, component: str, name: str) -> bool:
    """Delete and stop what it ran; False when there was none (or the component is
    unknown)."""
    if component == SHOVEL:
        return broker.shovels.clear(vhost, name)
    if component in FEDERATION:
        return broker.federation.clear(vhost, component, name)
    if component == OPERATOR_COMPONENT:
        return broker.vhosts[vhost].clear_operator_policy(name)
    return False
