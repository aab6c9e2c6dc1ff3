"""`soakgate campaign` turns bad input into one line and exit code 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from soakgate.cli.main import main


def test_a_bad_campaign_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "c.toml"
    bad.write_text('devices = ["cpu:0"]\n[server]\ncommand = "srv {prot}"\n')
    code = main(["campaign", str(bad), "--db", str(tmp_path / "runs.sqlite")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "{prot}" in err and "Traceback" not in err
    assert not (tmp_path / "runs.sqlite").exists()  # nothing is created for a bad file


def test_help_lists_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["campaign", "--help"])
    assert "--resume" in capsys.readouterr().out


def test_an_unknown_placeholder_in_a_configs_environment_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "c.toml"
    bad.write_text(
        'devices = ["cpu:0"]\n[server]\ncommand = "srv {port}"\n[[configs]]\nlabel = "a"\n'
        'env = {CACHE = "/c/{gpu}"}\n[load]\nrequests = 5\n'
    )
    code = main(["campaign", str(bad), "--db", str(tmp_path / "runs.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "{gpu}" in err and "Traceback" not in err
    assert "env of config 'a': CACHE" in err
    assert not (tmp_path / "runs.sqlite").exists()
