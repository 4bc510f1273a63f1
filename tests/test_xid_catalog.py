"""collectors/rules/xid_catalog.py regenerates the committed Xid catalog exactly; ``--check`` tells when it does not."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "xid_catalog", Path(__file__).resolve().parents[1] / "collectors" / "rules" / "xid_catalog.py")
xid_catalog = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(xid_catalog)


def test_generator_reproduces_committed_catalog() -> None:
    assert xid_catalog.render() == xid_catalog.CATALOG.read_text()
    assert xid_catalog.main(["--check"]) == 0


def test_check_fails_in_one_line_on_a_stale_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "xid.toml"
    stale.write_text(xid_catalog.CATALOG.read_text().replace('action = "drain_node"', 'action = "none"', 1))
    monkeypatch.setattr(xid_catalog, "CATALOG", stale)
    assert xid_catalog.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "out of date" in err and "python collectors/rules/xid_catalog.py" in err
    assert xid_catalog.main([]) == 0 and stale.read_text() == xid_catalog.render()
    assert xid_catalog.main(["--check"]) == 0


def test_table_rows_are_checked(tmp_path: Path) -> None:
    bad = tmp_path / "t.psv"
    bad.write_text("# comment\n13|MNEMONIC|too few fields\n")
    with pytest.raises(ValueError, match=r"t\.psv:2: want code\|mnemonic"):
        xid_catalog.render(bad)
