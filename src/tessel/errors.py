"""Every error Tessel raises on bad input: one class per kind, each saying what and where."""

from __future__ import annotations


class TesselError(Exception):
    """Base class of all Tessel errors."""


class TesselParseError(TesselError):
    """Malformed IR text; carries the 1-based line and column."""

    def __init__(self, message: str, line: int, column: int, source: str = "<text>"):
        self.line, self.column, self.source = line, column, source
        super().__init__(f"{source}:{line}:{column}: {message}")


class TesselVerifyError(TesselError):
    """An IR graph breaks an invariant; the message names the op, the value and what is wrong."""


class TesselUnsupportedOpError(TesselError):
    """One or more ops of a model cannot be imported; lists every one with its source location."""

    def __init__(self, unsupported: list[tuple[str, str]], host_fallback: bool = False):
        self.unsupported = unsupported  # (op name, source location)
        lines = [f"  {op} at {loc}" for op, loc in unsupported]
        advice = ("Rewrite these in the model with supported ops (docs/frontend.md lists them)"
                  + (", or cut the model before them (`tessel compile --until MODULE`, "
                     "tessel.cut) and run the rest in PyTorch." if host_fallback else
                     ", or import with host fallback (allow_host_ops=True / --host-fallback) "
                     "to run them on the CPU."))
        super().__init__(f"{len(unsupported)} unsupported op(s):\n" + "\n".join(lines) + "\n"
                         + advice)


class TesselExportError(TesselError):
    """torch.export cannot trace a model (wrong example inputs, data-dependent control flow,
    an unsupported Python construct); gives torch's first useful line and the user's source
    line where it happened."""


class TesselConfigError(TesselError):
    """A bad architecture preset, option or argument; names the key and the allowed values."""


class TesselFormatError(TesselError):
    """A malformed .tsl binary; says what is wrong and at which offset or section."""


class TesselSimError(TesselError):
    """The simulator trapped (e.g. an out-of-range access); names the engine and instruction index."""


class TesselCompileError(TesselError):
    """The backend cannot compile a model (e.g. a tensor does not fit a memory budget)."""


def did_you_mean(name: str, known: list[str] | tuple[str, ...]) -> str:
    """' (did you mean 'x'?)' for the closest known name, or '' when none is close."""
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
