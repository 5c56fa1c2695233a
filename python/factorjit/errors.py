"""factorjit's exceptions: the C++ library's fj::Error classes, as Python classes.

Every failure the library reports carries its whole context in the message (which operator, input,
NVRTC log, CUDA error name). The classes also derive from the built-in exception a Python caller would
expect, so ``except ValueError`` catches bad input as it does for NumPy.
"""


class Error(Exception):
    """Any error factorjit reports (C++ ``fj::Error``)."""


class ExprError(Error, ValueError):
    """An expression that cannot be built: a bad window length, mismatched corr windows, ...
    (C++ ``fj::ExprError``)."""


class ParseError(ExprError):
    """Formula text that does not parse (C++ ``fj::ParseError``). The message holds the line, the column
    and a caret under it; ``line`` and ``column`` (1-based) say where."""

    line = 0
    column = 0


class InputError(Error, ValueError):
    """Panels that do not fit the program: shape or dtype mismatch, a bad layout (C++ ``fj::InputError``)."""


class MissingInputError(InputError, KeyError):
    """An input the program reads was not given. Also a KeyError, as a missing key of a mapping is."""

    def __str__(self):  # KeyError's str() quotes its argument; the message reads better plain
        return str(self.args[0]) if self.args else ""


class BackendError(Error, RuntimeError):
    """A backend failure: LLVM, NVRTC, the CUDA driver (C++ ``fj::BackendError``)."""


class RunError(Error, RuntimeError):
    """A run that failed after it started: a chunk, an allocation or a kernel (C++ ``fj::RunError``). The
    message names the chunk and the cause; the inputs are untouched, the outputs' contents unspecified."""
