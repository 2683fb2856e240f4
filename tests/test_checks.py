"""The blocks' constructors refuse a wrong argument in one line naming it and its value."""

import pytest
from conftest import refusal

from superfabric.config import FabricConfig
from superfabric.hdl.ecn import EcnMarker
from superfabric.hdl.egress_queue import EgressQueue
from superfabric.hdl.fabric.router import Router
from superfabric.hdl.fabric.top import Fabric
from superfabric.hdl.islip import ISLIP
from superfabric.hdl.pfc import PfcEgress, PfcIngress
from superfabric.hdl.rdma.dcqcn import NotificationPoint, ReactionPoint
from superfabric.hdl.rdma.fabric import RdmaFabric
from superfabric.hdl.rdma.fault_injector import FaultInjector
from superfabric.hdl.rdma.keys import KeyTables
from superfabric.hdl.skid_buffer import SkidBuffer
from superfabric.hdl.stimulus.top import Stimulus
from superfabric.hdl.switch import Switch
from superfabric.hdl.voq import VOQBuffer

CFG = FabricConfig.load(preset="tiny")

# (the constructor called with one wrong argument, the exception, the argument, its value)
CASES = {
    "skid-shape": (lambda: SkidBuffer(payload_shape="flit"), TypeError, "payload_shape", "'flit'"),
    "egress-shape": (lambda: EgressQueue(payload_shape=None), TypeError, "payload_shape", "None"),
    "islip-ports": (lambda: ISLIP(ports=1, priorities=2, iterations=1), ValueError, "ports", "1"),
    "islip-priorities": (lambda: ISLIP(ports=4, priorities=2.0, iterations=1), TypeError,
                         "priorities", "2.0"),
    "islip-iterations": (lambda: ISLIP(ports=4, priorities=2, iterations=0), ValueError,
                         "iterations", "0"),
    "islip-too-many": (lambda: ISLIP(ports=4, priorities=2, iterations=5), ValueError,
                       "iterations", "5"),
    "voq-vcs": (lambda: VOQBuffer(CFG, vcs=0), ValueError, "vcs", "0"),
    "voq-outputs": (lambda: VOQBuffer(CFG, outputs="4"), TypeError, "outputs", "'4'"),
    "ecn-most": (lambda: EcnMarker(CFG, most=-1), ValueError, "most", "-1"),
    "pfc-refresh": (lambda: PfcIngress(CFG, refresh=True), TypeError, "refresh", "True"),
    "pfc-ports": (lambda: PfcEgress(CFG, ports=0), ValueError, "ports", "0"),
    "np-interval": (lambda: NotificationPoint(contexts=4, interval="8"), TypeError, "interval",
                    "'8'"),
    "rp-channels": (lambda: ReactionPoint(channels=0, units=CFG.dcqcn.units, max_packet_flits=4),
                    ValueError, "channels", "0"),
}
BLOCKS = {"switch": Switch, "router": Router, "fabric": Fabric, "rdma-fabric": RdmaFabric,
          "fault-injector": FaultInjector, "key-tables": KeyTables, "stimulus": Stimulus,
          "voq": VOQBuffer, "ecn": EcnMarker, "pfc-egress": PfcEgress}
for name, block in BLOCKS.items():
    CASES[f"{name}-cfg"] = (lambda block=block: block({"switch": {}}), TypeError, "cfg",
                            "{'switch': {}}")


@pytest.mark.parametrize("case", CASES)
def test_a_wrong_argument_is_named_with_its_value(case):
    build, error, argument, value = CASES[case]
    message = refusal(build, error)
    assert message.startswith(f"{argument} must be") and message.endswith(f"not {value}"), message
    assert "\n" not in message
