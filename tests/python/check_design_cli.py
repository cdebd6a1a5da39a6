#!/usr/bin/env python3
"""docs/DESIGN.md against the binary's own lists, from `cpbench list --json` (issue 39 item 4).

  - "Command line": the table with a `flag` column has a row for every flag the binary takes
    (a boolean's --no-X form beside X), and no row names a flag the binary lacks;
  - "Strategies": the table's names are the registered strategies, in the registry's order;
  - "Report essentials": the schema version it states (the `schema_version  N` line of the field
    list, and "schema version N" in the text above it) is the schema_version the binary writes.

usage: check_design_cli.py CPBENCH_BIN DESIGN_MD     exit 0 all checks pass, 1 otherwise
"""
import json
import re
import subprocess
import sys

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def list_json(binary):
    for _ in range(3):  # Open MPI's singleton start sometimes fails on a loaded machine: not cpbench
        proc = subprocess.run([binary, "list", "--json"], capture_output=True, text=True, timeout=120)
        if "error occurred in MPI_Init" not in proc.stdout + proc.stderr:
            break
    if proc.returncode != 0:
        raise SystemExit(f"check_design_cli: cpbench list --json exited {proc.returncode}: {proc.stderr[-400:]}")
    return json.loads(proc.stdout)


def section(text, title):
    """The body of the '## title' section, up to the next '## ' heading."""
    m = re.search(r"^## " + re.escape(title) + r"\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    if not m:
        raise SystemExit(f"check_design_cli: DESIGN.md has no '## {title}' section")
    return m.group(1)


def table(body, column):
    """The cells under `column` of the first Markdown table in `body` whose header has it."""
    lines = body.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if line.startswith("|") and column in cells:
            col = cells.index(column)
            rows = []
            for row in lines[i + 2:]:  # past the |---| line
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]][col])
            return rows
    raise SystemExit(f"check_design_cli: no table with a '{column}' column")


def main():
    binary, design = sys.argv[1], sys.argv[2]
    listing = list_json(binary)
    with open(design, encoding="utf-8") as f:
        text = f.read()
    failures = []

    # Command line: one row per flag, both ways.
    flags = {o["flag"] for o in listing["options"]}
    negated = {o["negated"] for o in listing["options"] if "negated" in o}
    rows = table(section(text, "Command line"), "flag")
    in_table = []
    for cell in rows:
        named = FLAG.findall(cell)
        if not named:
            failures.append(f"command-line table row {cell!r} names no flag")
        for flag in named:
            if flag not in flags | negated:
                failures.append(f"command-line table names {flag}, which the binary does not take")
        in_table += named
    for flag in sorted((flags | negated) - set(in_table)):
        failures.append(f"{flag} (cpbench list --json) has no row in DESIGN.md's command-line table")
    for flag in sorted({f for f in in_table if in_table.count(f) > 1}):
        failures.append(f"{flag} has more than one row in the command-line table")

    # Strategies: the registry's names, in its order.
    registered = [s["name"] for s in listing["strategies"]]
    documented = [m.group(1) for cell in table(section(text, "Strategies"), "name")
                  for m in [re.fullmatch(r"`([a-z0-9-]+)`", cell)] if m]
    for name in registered:
        if name not in documented:
            failures.append(f"strategy {name} is registered but not in DESIGN.md's strategy table")
    for name in documented:
        if name not in registered:
            failures.append(f"DESIGN.md's strategy table lists {name}, which is not registered")
    if not failures and documented != registered:
        failures.append(f"DESIGN.md's strategy table order {documented} is not the registry's {registered}")

    # Schema version: every place the section states it.
    essentials = section(text, "Report essentials")
    stated = re.findall(r"^schema_version\s+(\d+)\s*$", essentials, re.M)
    stated += re.findall(r"schema version (\d+)", essentials)
    if len(stated) < 2:
        failures.append("DESIGN.md's Report essentials no longer states the schema version as "
                        "'schema_version  N' and 'schema version N'")
    for n in stated:
        if int(n) != listing["schema_version"]:
            failures.append(f"DESIGN.md states schema version {n}; the binary writes {listing['schema_version']}")

    for f in failures:
        print("FAIL", f)
    print(f"check_design_cli: {len(rows)} command-line rows for {len(flags)} flags, {len(documented)} strategies, "
          f"schema {listing['schema_version']}; {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
