"""The C runtime as an optional extension: `pip install` builds libtessel, the C NPU model and
the host wrapper (tessel/runtime/c) with the system C compiler into tessel/runtime/_ctessel*.so,
which tessel.runtime.cengine loads with ctypes. Without a compiler the build says so in one line
and the install goes on: everything else works, and the C engine names what is missing when it
is used. The rest of the package is configured in pyproject.toml."""

import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))
from tessel.runtime.cbuild import C_ROOT, HOST_SOURCES, source_hash, sources  # noqa: E402


class OptionalBuild(build_ext):
    """build_ext that turns a missing or failing C compiler into one line."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any failure of the optional C part
            print(f"tessel: the C runtime was not built ({type(exc).__name__}: {exc}); "
                  "everything else works, `tessel run --engine c` needs a C compiler")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            print(f"tessel: the C runtime was not built ({type(exc).__name__}: {exc}); "
                  "everything else works, `tessel run --engine c` needs a C compiler")

    def get_export_symbols(self, ext: Extension) -> list[str]:
        return []  # a plain shared library loaded with ctypes, not a Python module


setup(
    ext_modules=[Extension(
        "tessel.runtime._ctessel", [str(p.relative_to(Path.cwd())) for p in sources(HOST_SOURCES)],
        include_dirs=[str((C_ROOT / "include").relative_to(Path.cwd()))],
        define_macros=[("TSL_SOURCE_HASH", f'"{source_hash()}"')],
        extra_compile_args=["-std=c99", "-O3"], libraries=["m"], optional=True)],
    cmdclass={"build_ext": OptionalBuild},
)
