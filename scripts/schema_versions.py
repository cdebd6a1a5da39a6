#!/usr/bin/env python3
"""The report schema's version guard (results_schema/README.md, "Versioning").

Every object of the report schema is closed, so any change to what the schema accepts must bump
`schema_version`. This tool makes that checkable: results_schema/schema_versions.json records,
for every version, the sha256 of its schema's canonical form, and

  scripts/schema_versions.py            checks every schema file in results_schema/ against it
                                        (exit 0 all match, 1 a mismatch, 2 a missing or broken file)
  scripts/schema_versions.py --print    prints {version: digest} of the files as they are now

The canonical form is the schema with its annotations removed ("description", "$comment",
"title", "examples": changing only those keeps the version, README's rule) and dumped with sorted
keys, so reformatting or reordering keys does not count as a change either. An annotation keyword
is removed only where it is a keyword: a property *named* "description" (under "properties",
"$defs", ...) and the values of "const", "enum" and "default" are data and stay.

Which file holds which version: report.schema.json is the current one, report.schema.v<N>.json the
kept ones; each declares its version in properties.schema_version.const.
"""
import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "results_schema"
CURRENT = "report.schema.json"
RECORD = "schema_versions.json"

ANNOTATIONS = frozenset({"description", "$comment", "title", "examples"})
# Keywords whose value maps names (not keywords) to subschemas.
NAMED_SUBSCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
# Keywords whose value is instance data, kept verbatim.
DATA = frozenset({"const", "enum", "default"})


def canonical(schema):
    """The schema without its annotations (a JSON Schema; see the module's docstring)."""
    if isinstance(schema, list):
        return [canonical(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ANNOTATIONS:
            continue
        if key in DATA:
            out[key] = value
        elif key in NAMED_SUBSCHEMAS and isinstance(value, dict):
            out[key] = {name: canonical(sub) for name, sub in value.items()}
        else:
            out[key] = canonical(value)
    return out


def digest(schema):
    """sha256 (hex) of the canonical form, dumped with sorted keys and no whitespace."""
    text = json.dumps(canonical(schema), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def declared_version(schema):
    """The version a schema file declares (properties.schema_version.const)."""
    return schema["properties"]["schema_version"]["const"]


def schema_files(folder=SCHEMA_DIR):
    """{version: path} of the current schema and every kept report.schema.v<N>.json; raises
    ValueError when a kept file's name and its declared version disagree or two files claim one."""
    folder = Path(folder)
    found = {}
    paths = [folder / CURRENT] + sorted(p for p in folder.glob("report.schema.v*.json"))
    for path in paths:
        ver = declared_version(json.loads(path.read_text(encoding="utf-8")))
        m = re.fullmatch(r"report\.schema\.v(\d+)\.json", path.name)
        if m and int(m.group(1)) != ver:
            raise ValueError(f"{path.name} declares schema_version {ver}")
        if ver in found:
            raise ValueError(f"{path.name} and {found[ver].name} both declare schema_version {ver}")
        found[ver] = path
    return found


def current_version(folder=SCHEMA_DIR):
    return declared_version(json.loads((Path(folder) / CURRENT).read_text(encoding="utf-8")))


def problems(folder=SCHEMA_DIR):
    """Every disagreement between the schema files and the record, one message each."""
    folder = Path(folder)
    record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    out = []
    for ver, path in sorted(schema_files(folder).items()):
        got = digest(json.loads(path.read_text(encoding="utf-8")))
        want = record.get(str(ver))
        if want is None:
            out.append(f"{path.name}: schema_version {ver} has no digest in {RECORD} (add \"{ver}\": \"{got}\" "
                       "when the version is bumped)")
        elif got != want:
            hint = ("the schema changed without a version bump: bump schema_version (README's Versioning), "
                    "keep the old file as report.schema.v%d.json and record the new digest" % ver) \
                if path.name == CURRENT else "a kept schema must not change"
            out.append(f"{path.name}: schema_version {ver} digest {got} != recorded {want}: {hint}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description="Check the report schema files against results_schema/" + RECORD)
    ap.add_argument("--print", action="store_true", help="print {version: digest} of the schema files as they are")
    ap.add_argument("--dir", default=str(SCHEMA_DIR), help="the schema folder (default: %(default)s)")
    args = ap.parse_args(argv)
    try:
        if args.print:
            files = schema_files(args.dir)
            print(json.dumps({str(v): digest(json.loads(p.read_text(encoding="utf-8")))
                              for v, p in sorted(files.items())}, indent=1))
            return 0
        found = problems(args.dir)
    except (OSError, ValueError, KeyError) as e:
        print(f"schema_versions: {e}", file=sys.stderr)
        return 2
    for p in found:
        print(f"schema_versions: {p}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
