"""What the collective engine's RTL and model share, as plain data: its schedule entry
(docs/spec/collective.md section 15.2), its notification word, its host memory's keys, how
it cuts a chunk into WRITEs and its adder's default NaN (section 15.8).

A collective's schedule is, per accelerator, an ordered list of steps; the
engine executes its list in order, one entry of its schedule memory a step.
A step waits until the accelerator has applied its first ``wait`` incoming
chunks (receive slots ``0 .. wait-1``), then writes ``length`` elements from
its buffer at ``src`` to accelerator ``peer``'s buffer at ``dst``; the chunk
is the ``slot``-th the peer applies, added into its buffer (``reduce``) or
copied. Offsets and lengths count 32-bit elements. All fields are LSB first.
"""

from .pool import ACCELERATOR_BITS
from .rdma_wire import LEN_BITS, pack, unpack

__all__ = ["OFFSET_BITS", "SLOT_BITS", "STEP_FIELDS", "STEP_BITS", "STEP_WORD_BITS",
           "STEP_WORDS", "step_words", "step_fields", "NOTIFY_FIELDS", "notify_word",
           "notify_fields", "DEFAULT_NAN", "LOCAL_KEY", "REMOTE_KEY", "MAX_WR_WORDS",
           "write_words"]

#: Offsets and lengths in 32-bit elements: a buffer of up to 2^26 elements (256 MiB), so a
#: tens-of-MiB all-to-all (input and output halves) fits.
OFFSET_BITS = 26
#: Receive slots per accelerator and run: 2^16 - 1 chunks, with ``wait`` up to all of them.
SLOT_BITS = 16

#: One step: the ``peer`` written to, whether the peer adds the chunk (``reduce``) or copies
#: it, the chunk's place in this buffer (``src``) and the peer's (``dst``), its ``length``,
#: the peer's receive ``slot`` it fills and the local receive slots it ``wait``s for.
STEP_FIELDS = (("peer", ACCELERATOR_BITS), ("reduce", 1), ("src", OFFSET_BITS),
               ("dst", OFFSET_BITS), ("length", OFFSET_BITS + 1), ("slot", SLOT_BITS),
               ("wait", SLOT_BITS + 1))
STEP_BITS = sum(width for _, width in STEP_FIELDS)
#: The schedule memory is 64 bits wide; a step takes two words, low word first.
STEP_WORD_BITS = 64
STEP_WORDS = -(-STEP_BITS // STEP_WORD_BITS)


def step_words(**fields: int) -> tuple[int, ...]:
    """The schedule memory words of a step, low word first.

    Raises
    ------
    ValueError
        A field does not fit its width.
    """
    for name, width in STEP_FIELDS:
        value = fields.get(name, 0)
        if not 0 <= value < 1 << width:
            raise ValueError(f"step {name} = {value}: must be 0 .. {(1 << width) - 1}")
    bits = pack(STEP_FIELDS, **fields)
    mask = (1 << STEP_WORD_BITS) - 1
    return tuple((bits >> (STEP_WORD_BITS * k)) & mask for k in range(STEP_WORDS))


def step_fields(words) -> dict[str, int]:
    """The fields of a step from its schedule memory words, low word first."""
    bits = sum(int(w) << (STEP_WORD_BITS * k) for k, w in enumerate(words))
    return unpack(STEP_FIELDS, bits)


#: A chunk's notification, the one 64-bit word of the SEND that follows its WRITEs
#: (docs/spec/collective.md section 15.8): ``valid`` (always 1, so a word still zero is a
#: notification not yet arrived), whether the receiver adds the chunk (``reduce``), the
#: chunk's first element within its first staging word (``parity``: the sender's ``src``
#: mod 2), and the step's ``dst`` and ``length``. The receive slot is where it lands.
NOTIFY_FIELDS = (("valid", 1), ("reduce", 1), ("parity", 1), ("dst", OFFSET_BITS),
                 ("length", OFFSET_BITS + 1))


def notify_word(*, reduce: int, parity: int, dst: int, length: int) -> int:
    """The notification word of a chunk (``valid`` set).

    Raises
    ------
    ValueError
        A field does not fit its width.
    """
    fields = dict(valid=1, reduce=reduce, parity=parity, dst=dst, length=length)
    for name, width in NOTIFY_FIELDS:
        if not 0 <= fields[name] < 1 << width:
            raise ValueError(f"notification {name} = {fields[name]}: must be 0 .. "
                             f"{(1 << width) - 1}")
    return pack(NOTIFY_FIELDS, **fields)


def notify_fields(word: int) -> dict[str, int]:
    """The fields of a notification word."""
    return unpack(NOTIFY_FIELDS, int(word))


#: The apply unit's binary32 sum of an infinity and an infinity of the other sign (x86's "real
#: indefinite" NaN; section 15.8.3).
DEFAULT_NAN = 0xFFC00000

#: The registrations of a collective's host memory (table entries 0 and 1, section 15.8.1):
#: the buffer and outbox, read by the engine's own WRs; the staging and notifications,
#: written by the peers'.
LOCAL_KEY, REMOTE_KEY = 0, 1

#: The longest message a WR carries (the RETH's 12-bit length).
MAX_WR_WORDS = (1 << LEN_BITS) - 1


def write_words(packet_words: int) -> int:
    """The words of every WRITE of a chunk but its last: whole packets of ``packet_words``
    payload words, as many as a WR carries (section 15.8.2)."""
    return MAX_WR_WORDS // packet_words * packet_words
