"""Private (and baseline) GNN training recipes. Importing this package registers every
defense module in it with :mod:`dpaudit.training.registry`."""

import importlib
import pkgutil

for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
