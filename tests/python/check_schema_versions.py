#!/usr/bin/env python3
"""The report schema's version guard (ctest 'schema_versions'; scripts/schema_versions.py).

The schema may not change what it accepts without a bump of schema_version: every schema file's
canonical digest must equal the one results_schema/schema_versions.json records for the version
it declares, the readers must know the current version, and a report of every version they know
must have its schema file. The C++ writer's schema_version is checked against the schema in
tests/unit/test_metrics.cpp ("the writer's schema_version is the schema's").

Each guard is also run on a copy of results_schema/ with one edit, to show that it fails.
(Not named test_*.py: tests/python/CMakeLists.txt registers it as its own ctest, schema_versions.)
"""
import json
import shutil
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import schema_versions as sv  # noqa: E402
import validate_report  # noqa: E402


class SchemaCopy:
    """results_schema/ copied to a temporary folder, to edit one file and run the guard on it."""

    def __enter__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="cpbench-schema-")
        self.dir = Path(self._tmp.name) / "results_schema"
        shutil.copytree(sv.SCHEMA_DIR, self.dir)
        return self

    def __exit__(self, *exc):
        self._tmp.cleanup()

    def edit(self, name, change):
        path = self.dir / name
        schema = json.loads(path.read_text(encoding="utf-8"))
        change(schema)
        # Written in another layout than the original (indent 4), which must not matter.
        path.write_text(json.dumps(schema, indent=4), encoding="utf-8")


class VersionGuardTest(unittest.TestCase):
    def test_every_schema_file_matches_its_recorded_digest(self):
        self.assertEqual(sv.problems(), [])
        self.assertEqual(sv.main([]), 0)

    def test_readers_know_the_current_version_and_have_a_schema_for_each(self):
        current = sv.current_version()
        self.assertEqual(max(validate_report.SUPPORTED_SCHEMA_VERSIONS), current)
        files = sv.schema_files()
        self.assertEqual(max(files), current, "the current schema is the newest file")
        for ver in validate_report.SUPPORTED_SCHEMA_VERSIONS:
            self.assertIn(ver, files, f"readers accept schema {ver} but results_schema/ has no file for it")
            self.assertEqual(validate_report.schema_path(ver), files[ver])

    def test_a_change_without_a_bump_fails(self):
        # A new optional field in a result: a report with it is invalid under the recorded version.
        def add_field(s):
            s["$defs"]["result"]["properties"]["extra"] = {"type": "number"}
        with SchemaCopy() as c:
            self.assertEqual(sv.problems(c.dir), [])
            c.edit(sv.CURRENT, add_field)
            found = sv.problems(c.dir)
            self.assertEqual(len(found), 1, found)
            self.assertIn("report.schema.json", found[0])
            self.assertIn("without a version bump", found[0])
            self.assertEqual(sv.main(["--dir", str(c.dir)]), 1)

    def test_an_enum_value_or_required_change_fails(self):
        def add_dtype(s):
            s["properties"]["config"]["properties"]["dtype"]["enum"].append("fp8")
        def drop_required(s):
            s["required"].remove("complete")
        for change in (add_dtype, drop_required):
            with SchemaCopy() as c:
                c.edit(sv.CURRENT, change)
                self.assertTrue(sv.problems(c.dir), change.__name__)

    def test_annotations_only_keep_the_version(self):
        def annotate(s):
            s["description"] += " More words."
            s["title"] = "another title"
            s["$comment"] = "a note"
            s["properties"]["config"]["description"] = "reworded"
            s["properties"]["config"]["examples"] = [{}]
        with SchemaCopy() as c:
            c.edit(sv.CURRENT, annotate)
            self.assertEqual(sv.problems(c.dir), [])

    def test_a_property_named_like_an_annotation_is_not_one(self):
        base = {"type": "object", "properties": {"a": {"type": "string"}}}
        named = {"type": "object", "properties": {"a": {"type": "string"}, "description": {"type": "string"},
                                                  "title": {"type": "string"}}}
        self.assertNotEqual(sv.digest(base), sv.digest(named))
        # ... and the values of const / enum are data, whatever they look like.
        self.assertNotEqual(sv.digest({"const": {"description": 1}}), sv.digest({"const": {}}))
        self.assertNotEqual(sv.digest({"enum": [{"title": "x"}]}), sv.digest({"enum": [{}]}))

    def test_a_kept_schema_must_not_change(self):
        kept = sorted(v for v in sv.schema_files() if v != sv.current_version())
        self.assertTrue(kept, "no kept schema file")
        name = f"report.schema.v{kept[0]}.json"
        with SchemaCopy() as c:
            c.edit(name, lambda s: s["required"].append("extra"))
            found = sv.problems(c.dir)
            self.assertEqual(len(found), 1, found)
            self.assertIn(name, found[0])
            self.assertIn("must not change", found[0])

    def test_a_new_version_needs_its_digest(self):
        def bump(s):
            s["properties"]["schema_version"]["const"] = 99
        with SchemaCopy() as c:
            c.edit(sv.CURRENT, bump)
            found = sv.problems(c.dir)
            self.assertEqual(len(found), 1, found)
            self.assertIn("schema_version 99 has no digest", found[0])

    def test_a_kept_file_must_declare_its_own_version(self):
        kept = sorted(v for v in sv.schema_files() if v != sv.current_version())
        name = f"report.schema.v{kept[0]}.json"
        with SchemaCopy() as c:
            c.edit(name, lambda s: s["properties"]["schema_version"].update(const=kept[0] + 100))
            self.assertEqual(sv.main(["--dir", str(c.dir)]), 2)


if __name__ == "__main__":
    unittest.main()
