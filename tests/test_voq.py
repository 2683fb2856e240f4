"""The input buffer (``hdl/voq.py``) against its model (``sim/voq.py``) under Amaranth's
simulator, cycle by cycle: random buffer sizes, classes, schedulers and full-buffer policies,
a source that offers packets flit by flit with stalls (holding a flit until it is taken, and
a random ``last`` bit, which the buffer must regenerate), and a read side that starts complete
packets and advances them as the switch does, with outputs short of credit. Every output of
the buffer is compared with the model every cycle, and every flit read with the flit written.
"""

import random

import pytest
from amaranth.hdl import Value

from superfabric.config import FabricConfig
from superfabric.formats.packet import FlitCodec, packet_fields
from superfabric.hdl.voq import VOQBuffer
from superfabric.sim.voq import VOQModel

from block_stimulus import drive, simulate

#: Cycles per case.
CYCLES = 3000
#: Seeds of the cases; each draws a buffer and a traffic mix.
SEEDS = range(8)


def _draw(rng: random.Random) -> tuple[FabricConfig, dict]:
    """A buffer configuration and the traffic around it."""
    max_flits = rng.choice([1, 2, 4, 8])
    # Some buffers hold exactly the longest packet, the others room for several.
    buffer = rng.choice([max_flits, max_flits + 3, 4 * max_flits, 40])
    cfg = FabricConfig.load(overrides=[
        f"switch.ports={rng.randrange(2, 9)}", f"switch.priorities={rng.randrange(1, 5)}",
        f"switch.max_packet_flits={max_flits}", f"switch.buffer_flits={max(buffer, max_flits)}",
        f"switch.data_width={rng.choice([8, 16, 32])}", "switch.tag_width=16",
        f"switch.scheduler={rng.choice(['islip', 'islip', 'fifo'])}",
        f"switch.ingress_full={rng.choice(['backpressure', 'drop'])}",
        "switch.islip_iterations=1"])
    # Reads slower than writes in some cases, so that buffers fill during a burst.
    traffic = {"offer": rng.choice([0.5, 1.0]), "no_credit": rng.choice([0.0, 0.3, 0.6]),
               "start": rng.choice([0.1, 0.5, 1.0]), "period": rng.choice([100, 400])}
    return cfg, traffic


class _Source:
    """Packets toward random queues, offered flit by flit; a flit offered stays offered
    until taken. Offers come in bursts of ``period`` cycles, so the buffer fills and drains."""

    def __init__(self, rng, cfg, codec, offer, period):
        self.rng, self.sw, self.codec = rng, cfg.switch, codec
        self.offer, self.period = offer, period
        self.packets = []            # (req, length, flits) per packet id
        self.current = None          # (packet id, flit index) being offered
        self.cycle = 0

    def _new_packet(self) -> int:
        sw, rng = self.sw, self.rng
        dst, prio = rng.randrange(sw.ports), rng.randrange(sw.priorities)
        length = rng.randrange(1, sw.max_packet_flits + 1)
        pkt = len(self.packets)
        data_mask = (1 << sw.data_width) - 1
        flits = [self.codec.pack(data=rng.getrandbits(sw.data_width) & data_mask,
                                 first=k == 0, last=rng.random() < 0.5, dst=dst, src=0,
                                 prio=prio, ecn=rng.randrange(4), length=length,
                                 tag=pkt & 0xFFFF) for k in range(length)]
        self.packets.append((dst * sw.priorities + prio, length, flits))
        return pkt

    def offered(self):
        """``(packet, flit index)`` offered this cycle, or None."""
        bursting = (self.cycle // self.period) % 2 == 0
        self.cycle += 1
        # A flit may come from the first cycle: the buffer needs no start-up sequence.
        if self.current is None and bursting and self.rng.random() < self.offer:
            self.current = (self._new_packet(), 0)
        return self.current

    def taken(self) -> None:
        pkt, k = self.current
        self.current = (pkt, k + 1) if k + 1 < self.packets[pkt][1] else None


def _stored(codec, flit: int, last: bool) -> int:
    """A flit as the buffer stores it: ``last`` regenerated from the length."""
    offset, mask = codec.field_spec("last")
    return (flit & ~(mask << offset)) | (int(last) << offset)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_cycle_equals_the_model(seed):
    rng = random.Random(seed)
    cfg, traffic = _draw(rng)
    sw = cfg.switch
    codec = FlitCodec(packet_fields(cfg))
    source = _Source(rng, cfg, codec, traffic["offer"], traffic["period"])
    dut = VOQBuffer(cfg)
    model = VOQModel(ports=sw.ports, priorities=sw.priorities, buffer_flits=sw.buffer_flits,
                     islip=sw.scheduler == "islip", drop=sw.ingress_full == "drop",
                     capacity=CYCLES + 1)
    wrong = []
    seen = {"stored": 0, "dropped": 0, "read": 0, "full": 0}

    async def testbench(ctx):
        reading = None       # (packet, next flit index) of the packet under way
        was_read = None      # (packet, flit index) read in the previous cycle, or None
        for cycle in range(CYCLES):
            offered = source.offered()
            req = model.requests()
            # Read side: the packet under way advances unless its output lacks credit;
            # a free input starts a complete packet of a requesting queue.
            start = advance = False
            start_q = 0
            if reading is not None:
                advance = rng.random() >= traffic["no_credit"]
            elif req and rng.random() < traffic["start"]:
                start = True
                start_q = rng.choice([q for q in range(sw.ports * sw.priorities) if req >> q & 1])
            valid = offered is not None
            flit = source.packets[offered[0]][2][offered[1]] if valid else 0
            # The router's routing decision for a head flit: its destination, VC 0.
            route = source.packets[offered[0]][0] // sw.priorities if valid else 0
            drive(ctx, [(dut.i.valid, valid), (dut.i.payload, flit), (dut.route_out, route),
                        (dut.start, start), (dut.start_q, start_q), (dut.advance, advance)])

            got = {name: ctx.get(Value.cast(getattr(dut, name))) for name in (
                "req", "rd_valid", "rd_last", "rd_payload", "wr_valid",
                "rx_packet", "drop_packet")}
            got["ready"] = ctx.get(dut.i.ready)
            # The free flits show in ``ready`` (backpressure) and ``drop_packet`` (drop).
            want = {"req": req, "rd_valid": int(was_read is not None),
                    "rd_last": 0, "wr_valid": 0, "rx_packet": 0, "drop_packet": 0}
            if was_read is not None:
                pkt, k = was_read
                _, length, flits = source.packets[pkt]
                want["rd_last"] = int(k + 1 == length)
                want["rd_payload"] = _stored(codec, flits[k], k + 1 == length)
            else:
                want["rd_payload"] = got["rd_payload"]      # not defined without rd_valid
            if valid:
                pkt, k = offered
                q, length, _ = source.packets[pkt]
                want["ready"] = int(model.ready(length))
                seen["full"] += k == 0 and model.free < length
                if want["ready"]:
                    head, keep, _ = model.take(pkt, q, length)
                    want["wr_valid"] = int(keep)
                    want["rx_packet"] = int(head and keep)
                    want["drop_packet"] = int(head and not keep)
                    seen["stored"] += head and keep
                    seen["dropped"] += head and not keep
                    if keep:
                        got["wr_index"] = ctx.get(dut.wr_index)
                        got["wr_prio"] = ctx.get(dut.wr_prio)
                        want["wr_index"], want["wr_prio"] = q, q % sw.priorities
                    if got["ready"]:
                        source.taken()
            else:
                want["ready"] = got["ready"]                # not defined without valid
            if got != want:
                wrong.append((cycle, {k: (got[k], want.get(k)) for k in got
                                      if got[k] != want.get(k)}))

            was_read = None
            if advance:
                was_read = reading
                pkt, k = reading
                reading = (pkt, k + 1) if k + 1 < source.packets[pkt][1] else None
            elif start:
                pkt = model.start(start_q)
                was_read = (pkt, 0)
                reading = (pkt, 1) if source.packets[pkt][1] > 1 else None
            if advance:
                model.advance()
            seen["read"] += was_read is not None
            model.clock()
            await ctx.tick()

    simulate(dut, testbench)
    assert not wrong, (f"{sw}: {len(wrong)} cycles differ; first (cycle, {{output: (RTL, "
                       f"model)}}): {wrong[:3]}")
    # The stimulus stored and read many packets, filled the buffer, and (dropping) dropped.
    assert seen["stored"] >= 100 and seen["read"] >= 100 and seen["full"] >= 10, (sw, seen)
    assert seen["dropped"] >= 10 or sw.ingress_full == "backpressure", (sw, seen)
