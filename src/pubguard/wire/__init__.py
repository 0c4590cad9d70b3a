"""Pure wire codecs, below every shell: broker messages, the link envelope, frames.

Nothing here does I/O. ``framing`` turns envelopes into length-prefixed MessagePack frames and
back (``FrameDecoder`` is sans-IO, bounded and strict), ``envelope`` builds and checks the
link-level envelopes (hello, message, batch, ack, heartbeat, status, bye), and ``messages``
holds the broker protocol's frozen message classes with their strict decoders.
"""

__all__: list[str] = []
