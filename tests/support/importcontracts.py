"""Import-linter contract types of this project (``setup.cfg`` ``[importlinter] contract_types``).

``stdlib_only``: every module of ``source_modules`` imports only the standard
library and modules of ``source_modules`` themselves. The launcher
(``ranktable``, packed into ``dist/ring-launch.pyz``) runs in images that
have nothing but a python3, so any other import, even a lazy one inside a
function (the graph holds those too), breaks it there. "Standard library"
is ``sys.stdlib_module_names`` of the linting interpreter minus
``newer_modules``: modules that appeared after the oldest Python the
launcher supports (``tomllib`` is 3.11's), which the contract names because
the linting interpreter would accept them.
"""

from __future__ import annotations

import sys

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


class StdlibOnlyContract(Contract):
    """Modules of ``source_modules`` import nothing outside the standard library and themselves."""

    type_name = "stdlib_only"

    source_modules = fields.ListField(subfield=fields.StringField())
    newer_modules = fields.ListField(subfield=fields.StringField(), required=False)

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        sources = [str(m) for m in self.source_modules]  # type: ignore[attr-defined]
        newer = {str(m) for m in (self.newer_modules or [])}  # type: ignore[union-attr]
        allowed = set(sys.stdlib_module_names) - newer
        offending: list[tuple[str, str, list[int]]] = []
        for source in sources:
            for module in sorted({source} | graph.find_descendants(source)):
                for imported in sorted(graph.find_modules_directly_imported_by(module)):
                    if any(imported == s or imported.startswith(s + ".") for s in sources):
                        continue
                    if imported.split(".")[0] in allowed:
                        continue
                    details = graph.get_import_details(importer=module, imported=imported)
                    offending.append((module, imported, [d["line_number"] for d in details]))
        return ContractCheck(kept=not offending, metadata={"offending": offending})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for module, imported, lines in check.metadata["offending"]:
            where = ", ".join(f"l.{n}" for n in lines) or "?"
            output.print_error(f"{module} -> {imported} ({where}): not the standard library of Python 3.9")
            output.new_line()
