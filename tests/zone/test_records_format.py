"""The serial follows the record makers' code: an upgrade that changes what the same objects
make changes every service's digest, with no number to bump by hand (a hand-kept version,
forgotten, left a restarted server with the old serial and new records, and a secondary's
IXFR answered "up to date")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mcsdns.data.objects import ServiceImport
from mcsdns.zone import journal
from mcsdns.zone.locality import OFF


def _copies(tmp_path: Path) -> list[str | None]:
    out: list[str | None] = []
    for i, src in enumerate(journal.maker_sources()):
        assert src is not None, "every maker module is read from its source"
        dst = tmp_path / f"{i}.py"
        shutil.copyfile(src, dst)
        out.append(str(dst))
    return out


def test_same_code_same_format(tmp_path: Path) -> None:
    assert journal.records_format(_copies(tmp_path)) == journal.RECORDS_FORMAT


@pytest.mark.parametrize("module", journal.MAKER_MODULES)
def test_a_change_to_any_maker_changes_the_format_and_every_digest(
        tmp_path: Path, module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    si = ServiceImport.parse({"metadata": {"namespace": "shop", "name": "web"},
                              "spec": {"type": "ClusterSetIP", "ips": ["10.9.0.1"],
                                       "ports": [{"port": 80, "protocol": "TCP"}]}})
    before = journal.service_digest(("shop", "web"), si, [], OFF)
    paths = _copies(tmp_path)
    edited = Path(str(paths[journal.MAKER_MODULES.index(module)]))
    edited.write_text(edited.read_text() + "\n# a maker changed\n")
    changed = journal.records_format(paths)
    assert changed != journal.RECORDS_FORMAT
    monkeypatch.setattr(journal, "RECORDS_FORMAT", changed)
    assert journal.service_digest(("shop", "web"), si, [], OFF) != before
