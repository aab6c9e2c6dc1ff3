"""Bench (issue 15): `report`, `report --html`, `compare` and `export --format parquet` on soak
databases of 100k, 1M and 10M generations (4 units, bursty collapses, texts for 1% of rows:
bench/reportdb.py).

For each size: CPU seconds (user + system, the command's whole process) and peak RSS (VmHWM,
sampled from /proc while it runs, so pages shared before exec are not counted) of each
command, the HTML file's size, and each CPU figure over the floor: one full scan of the same
table by the sqlite3 command line (`SELECT count(*), sum(collapsed), min(started_at),
max(ended_at), sum(completion_tokens) FROM generations`). Also the column readers' cost on the
same rows (ADBC/Arrow against Python's sqlite3), which chose the data path.

Run: nice -n 10 python bench/bench_report.py [--sizes 100000,1000000,10000000] [--keep DIR]
Databases are built once into --keep (4.6 GB at 10M) and reused.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import reportdb

FLOOR_SQL = (
    "SELECT count(*), sum(collapsed), min(started_at), max(ended_at), sum(completion_tokens) "
    "FROM generations"
)
COMMANDS = {
    "report": ("report", "{db}"),
    "report --html": ("report", "{db}", "--html", "{html}"),
    "compare": ("compare", "{db}", "eager", "compiled"),
    "export parquet": ("export", "{db}", "--format", "parquet", "--out", "{parquet}"),
}
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_and_peak(argv: list[str]) -> tuple[float, int, float]:
    """(CPU seconds, peak RSS bytes, wall seconds) of a command, from /proc while it runs
    (the CPU figure is superseded by the kernel's, `_children_cpu`)."""
    began = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak, cpu = 0, 0.0
    while process.poll() is None:
        try:
            with open(f"/proc/{process.pid}/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
            with open(f"/proc/{process.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
                cpu = (int(fields[11]) + int(fields[12])) / TICKS
        except (OSError, IndexError):
            pass
        time.sleep(0.02)
    error = process.stderr.read().decode() if process.stderr else ""
    if process.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({process.returncode}): {error[-500:]}")
    return cpu, peak, time.perf_counter() - began


def _children_cpu(argv: list[str]) -> tuple[float, int, float]:
    """CPU (from the kernel's accounting of the reaped child, exact) and peak RSS (VmHWM)."""
    before = os.times()
    _, peak, wall = _cpu_and_peak(argv)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return cpu, peak, wall


def floor(db: Path) -> float | None:
    """CPU seconds of one full scan by the sqlite3 command line (None when it is absent): the
    mean of as many scans as make 0.5 CPU s (at most 50), so that a small database's floor is not
    zero clock ticks."""
    if shutil.which("sqlite3") is None:
        return None
    total, scans = 0.0, 0
    while total < 0.5 and scans < 50:
        cpu, _, _ = _children_cpu(["sqlite3", str(db), FLOOR_SQL])
        total, scans = total + cpu, scans + 1
    return max(total / scans, 1.0 / TICKS / scans)


def readers(db: Path) -> tuple[float, float]:
    """CPU seconds to read every run's columns with the Arrow reader and with sqlite3."""
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from soakgate.report.load import load_columns\n"
        "from soakgate.store.columns import ArrowReader, Sqlite3Reader\n"
        "from soakgate.store.sqlite import read_only_uri, connect_read_only\n"
        "db = Path(sys.argv[1])\n"
        "if sys.argv[2] == 'arrow':\n"
        "    r = ArrowReader(read_only_uri(db), str(db))\n"
        "else:\n"
        "    r = Sqlite3Reader(connect_read_only(db))\n"
        "t = time.process_time(); load_columns(r, [], [], []); print(time.process_time() - t)\n"
    )
    found = []
    for which in ("arrow", "sqlite3"):
        done = subprocess.run([sys.executable, "-c", code, str(db), which], capture_output=True,
                              text=True, check=True)  # fmt: skip
        found.append(float(done.stdout.strip()))
    return found[0], found[1]


def bench(size: int, folder: Path, with_readers: bool) -> None:
    db = folder / f"report-{size}.sqlite"
    if not db.exists():
        seconds = reportdb.build_database(db, size)
        print(f"built {db.name}: {size:,} generations, {db.stat().st_size / 1e6:,.0f} MB "
              f"in {seconds:.0f} s", flush=True)  # fmt: skip
    base = floor(db)
    if base is None:
        print("sqlite3 command line not found (apt-get install -y sqlite3): no floor ratio")
    else:
        print(f"{size:>11,}  floor (sqlite3 full scan): {base:.3f} CPU s", flush=True)
    html = folder / f"report-{size}.html"
    for name, command in COMMANDS.items():
        parts = (p.format(db=db, html=html, parquet=folder / "export.parquet") for p in command)
        argv = [sys.executable, "-m", "soakgate", *parts]
        cpu, peak, wall = _children_cpu(argv)
        ratio = f", {cpu / base:.1f}x the floor" if base else ""
        print(f"{size:>11,}  {name:<14} {cpu:7.2f} CPU s ({wall:.1f} s wall), peak RSS "
              f"{peak / 2**20:,.0f} MiB{ratio}", flush=True)  # fmt: skip
    print(f"{size:>11,}  HTML size {html.stat().st_size / 1e6:.2f} MB", flush=True)
    if with_readers:
        arrow, plain = readers(db)
        print(f"{size:>11,}  columns read: Arrow (ADBC) {arrow:.2f} CPU s, sqlite3 {plain:.2f} "
              f"CPU s ({plain / arrow:.1f}x)", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--keep", help="folder for the databases (built once, reused)")
    parser.add_argument("--readers", action="store_true", help="also time the column readers")
    args = parser.parse_args()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="soakgate-report-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start")
    for size in (int(s) for s in args.sizes.split(",")):
        bench(size, folder, args.readers)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    if not args.keep:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
