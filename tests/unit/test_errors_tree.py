"""Every exception the package defines derives from PorteiroError, so a caller can catch
what Porteiro raises, and only that, with one except clause."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import porteiro
from porteiro.errors import PorteiroError


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(porteiro.__path__, "porteiro."):
        if module_info.name == "porteiro.__main__":
            continue  # running it is the CLI
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{name}"] = value
    return found


def test_every_exception_the_package_defines_derives_from_porteiro_error() -> None:
    classes = _exception_classes()
    assert "porteiro.errors.ParseError" in classes  # the walk reached the package's modules
    assert "porteiro.http.params.BadRequest" in classes
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, PorteiroError))
    assert outside == []
