"""The settings every member must share (``StackConfig.agreed``): the layer fields marked
agreed and the application's own, carried by JOIN_REQ and compared by the coordinator."""
import pytest

from raygroups.stack import StackConfig
from raygroups.stack.sim import Simulation


def test_agreed_lists_the_marked_layer_fields_and_the_applications_own():
    assert StackConfig.local().agreed() == {"primary.relay_above": 32}
    cfg = StackConfig.local(primary__relay_above=8, gms__agreed={"app.schema": 3, "ok": True})
    assert cfg.agreed() == {"primary.relay_above": 8, "app.schema": 3, "ok": True}
    # a setting added later is agreed only away from its default (older builds send none)
    tie = StackConfig.local(discovery="memory://x", primary__tie_breaker="store")
    assert tie.agreed() == {"primary.relay_above": 32, "primary.tie_breaker": "store"}
    # a built stack's GMS carries them
    sim = Simulation(1)
    m = sim.add_member("c", "a", cfg)
    assert m.stack.layer("gms").config.agreed == cfg.agreed()


@pytest.mark.parametrize("bad", [{"k": [1, 2]}, {"k": None}, {1: "v"}, {"k": b"raw"}])
def test_agreed_values_must_survive_the_wire_unchanged(bad):
    with pytest.raises(TypeError, match="gms__agreed"):
        StackConfig.local(gms__agreed=bad).agreed()
