"""Build namesrv; the Cython fast path is optional (namesrv.fastpath falls back to pure Python)."""
from __future__ import annotations

import logging
import os

from setuptools import find_packages, setup
from setuptools.command.build_ext import build_ext

log = logging.getLogger("setup")


class OptionalBuildExt(build_ext):
    """Build the extension when a compiler and Cython are there; otherwise install without it."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any build failure means "use the fallback"
            log.warning("namesrv._fastpath not built (%s); the pure-Python fallback will be used", exc)

    def build_extension(self, ext) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            log.warning("namesrv._fastpath not built (%s); the pure-Python fallback will be used", exc)


def extensions() -> list:
    if os.environ.get("NAMESRV_NO_EXTENSION") == "1":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []
    from setuptools import Extension

    ext = Extension("namesrv._fastpath", ["namesrv/_fastpath.pyx"], extra_compile_args=["-O3"])
    return cythonize([ext], language_level=3, compiler_directives={"boundscheck": False, "wraparound": False})


setup(
    name="namesrv",
    version="0.1.0",
    description="A RocketMQ-compatible NameServer with a ZeroMQ reactor and a Cython fast path",
    python_requires=">=3.11",
    packages=find_packages(include=["namesrv", "namesrv.*", "bench", "bench.*"]),
    package_data={"namesrv": ["*.pyx", "static/*"], "namesrv.fastpath": ["*.pxi"]},
    ext_modules=extensions(),
    cmdclass={"build_ext": OptionalBuildExt},
    install_requires=["pyzmq", "msgpack", "psutil", "orjson", "isal", "xxhash", "prometheus-client", "cryptography"],
    # namesrv-bench: the benchmarks' one entry point (its own dependencies are requirements-dev.txt's)
    entry_points={"console_scripts": ["namesrv = namesrv.__main__:main", "namesrv-admin = namesrv.admin:main",
                                      "namesrv-bench = bench.__main__:main"]},
)
