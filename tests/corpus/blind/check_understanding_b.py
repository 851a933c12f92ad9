#!/usr/bin/env python3
"""Validate the blind understanding set B (understanding_b.jsonl).

Checks only the data's own consistency against the fixture given in the
brief (8 utterances, seqs 1..8, turns 1..4); it does not run chd.
Exit status 0 when every check passes, 1 otherwise.
"""
import collections
import json
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE / "understanding_b.jsonl"

FIXTURE_SEQS = set(range(1, 9))
VOICES = {  # voice: target share
    "agent-formal": 0.35,
    "non-native": 0.25,
    "support-desk": 0.20,
    "product-manager": 0.20,
}
SHARE_TOLERANCE = 0.03
OPERATIONS = {"store", "retrieve", "remove", "summarize", "configure", "mark", "stats"}
SPEAKERS = {"user", "assistant", "system"}
TOP_KEYS = {"id", "voice", "query", "metadata", "data", "expect"}
REQUIRED_KEYS = {"id", "voice", "query", "expect"}
META_KEYS = {"conversation_id", "speaker", "turn_number"}
EXPECT_KEYS = {"operation", "stored", "seqs", "must_include", "must_exclude", "removed",
               "settings", "important", "include_summary", "summary_only", "error"}
SETTINGS = {"buffer_size": int, "max_tokens": int, "eviction_batch": int,
            "summary_token_limit": int, "eviction_policy": str}
POLICIES = {"fifo", "importance"}
OPEN_QUOTES = {'"', "'", "„", "«", "「", "“"}
CLOSE_QUOTES = {'"', "'", "“", "”", "»", "」"}
# Entries whose query deliberately carries one typo (outside any stored text).
TYPO_IDS = {"b-009", "b-049", "b-075"}
MAX_TYPO_SHARE = 0.10
MIN_ENTRIES = 160

errors = []


def err(eid, msg):
    errors.append(f"{eid}: {msg}")


def check_seq_list(eid, name, value, *, nonempty=True):
    if not isinstance(value, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in value):
        err(eid, f"{name} must be a list of integers, got {value!r}")
        return
    if nonempty and not value:
        err(eid, f"{name} is empty")
    bad = [s for s in value if s not in FIXTURE_SEQS]
    if bad:
        err(eid, f"{name} refers to seqs outside 1..8: {bad}")
    if value != sorted(set(value)):
        err(eid, f"{name} must be strictly ascending without duplicates: {value}")


def delimited(query, text):
    """The stored text must sit between quote marks so no instruction word can leak in."""
    start = 0
    while True:
        i = query.find(text, start)
        if i < 0:
            return False
        before = query[:i].rstrip(" ")
        after = query[i + len(text):].lstrip(" ")
        if before and before[-1] in OPEN_QUOTES and after and after[0] in CLOSE_QUOTES:
            return True
        start = i + 1


def main():
    lines = DATA.read_text(encoding="utf-8").splitlines()
    entries = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            err(f"line {n}", "blank line")
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError as exc:
            err(f"line {n}", f"not JSON: {exc}")

    ids = collections.Counter(e.get("id") for e in entries)
    for eid, c in ids.items():
        if c > 1:
            err(eid, f"id used {c} times")

    for e in entries:
        eid = e.get("id", "?")
        if not re.fullmatch(r"b-\d{3}", str(eid)):
            err(eid, "id must look like b-001")
        keys = set(e)
        if keys - TOP_KEYS:
            err(eid, f"unknown keys {sorted(keys - TOP_KEYS)}")
        if REQUIRED_KEYS - keys:
            err(eid, f"missing keys {sorted(REQUIRED_KEYS - keys)}")
            continue
        if e["voice"] not in VOICES:
            err(eid, f"unknown voice {e['voice']!r}")
        q = e["query"]
        if not isinstance(q, str) or not q.strip():
            err(eid, "empty query")
        meta = e.get("metadata", {})
        if set(meta) - META_KEYS:
            err(eid, f"metadata keys not allowed: {sorted(set(meta) - META_KEYS)}")
        if "speaker" in meta and meta["speaker"] not in SPEAKERS:
            err(eid, f"metadata.speaker {meta['speaker']!r}")
        if "turn_number" in meta and not (isinstance(meta["turn_number"], int) and meta["turn_number"] >= 0):
            err(eid, "metadata.turn_number must be a whole number >= 0")
        data = e.get("data", {})
        if "operation" in data:
            err(eid, "data.operation is not allowed (the text must be parsed)")
        if set(data) - {"text"}:
            err(eid, f"data keys other than text: {sorted(set(data) - {'text'})}")

        ex = e["expect"]
        if set(ex) - EXPECT_KEYS:
            err(eid, f"unknown expect keys {sorted(set(ex) - EXPECT_KEYS)}")
        op = ex.get("operation")
        if "error" in ex:
            if ex["error"] != "INVALID_ARGUMENT":
                err(eid, f"error must be INVALID_ARGUMENT, got {ex['error']!r}")
            if set(ex) != {"error"}:
                err(eid, "an error entry carries nothing but error")
            continue
        if op not in OPERATIONS:
            err(eid, f"operation {op!r} is not one of {sorted(OPERATIONS)}")
            continue

        allowed = {
            "store": {"operation", "stored"},
            "retrieve": {"operation", "seqs", "must_include", "must_exclude", "include_summary", "summary_only"},
            "remove": {"operation", "removed"},
            "summarize": {"operation"},
            "configure": {"operation", "settings"},
            "mark": {"operation", "important"},
            "stats": {"operation"},
        }[op]
        if set(ex) - allowed:
            err(eid, f"keys {sorted(set(ex) - allowed)} do not belong to a {op}")

        if op == "store":
            st = ex.get("stored")
            if not isinstance(st, dict) or "text" not in st or "speaker" not in st:
                err(eid, "store needs stored.text and stored.speaker")
                continue
            if set(st) - {"text", "speaker", "turn_number"}:
                err(eid, f"stored keys {sorted(set(st))}")
            text = st["text"]
            if st["speaker"] not in SPEAKERS:
                err(eid, f"stored.speaker {st['speaker']!r}")
            if "speaker" in meta and meta["speaker"] != st["speaker"]:
                err(eid, "stored.speaker disagrees with metadata.speaker")
            if "turn_number" in meta and meta.get("turn_number") != st.get("turn_number"):
                err(eid, "stored.turn_number disagrees with metadata.turn_number")
            if "turn_number" in st:
                tn = st["turn_number"]
                if not isinstance(tn, int) or tn < 0:
                    err(eid, "stored.turn_number must be a whole number")
                elif "turn_number" not in meta and not re.search(r"\bturn\b", q):
                    # automatic turn: a user opens turn 5, assistant/system join turn 4
                    auto = 5 if st["speaker"] == "user" else 4
                    if tn != auto:
                        err(eid, f"automatic turn should be {auto}, got {tn}")
            if data.get("text") is not None:
                if data["text"] != text:
                    err(eid, "stored.text differs from data.text")
            elif text not in q:
                err(eid, "stored.text does not occur verbatim in the query")
            elif not delimited(q, text):
                err(eid, "stored.text is not delimited by quote marks in the query")
            if text != text.strip() or not text:
                err(eid, "stored.text has leading/trailing whitespace or is empty")

        elif op == "retrieve":
            kinds = [k for k in ("seqs", "must_include", "summary_only") if k in ex]
            if len(kinds) != 1:
                err(eid, f"a retrieve expects exactly one of seqs / must_include / summary_only, got {kinds}")
            if "seqs" in ex:
                check_seq_list(eid, "seqs", ex["seqs"], nonempty=False)
            if "must_include" in ex:
                check_seq_list(eid, "must_include", ex["must_include"])
                if "must_exclude" in ex:
                    check_seq_list(eid, "must_exclude", ex["must_exclude"])
                    if set(ex["must_include"]) & set(ex["must_exclude"]):
                        err(eid, "must_include and must_exclude overlap")
            elif "must_exclude" in ex:
                err(eid, "must_exclude only with must_include (topic searches)")
            for flag in ("include_summary", "summary_only"):
                if flag in ex and ex[flag] is not True:
                    err(eid, f"{flag} must be true when given")
            if ex.get("summary_only") and ("include_summary" in ex):
                err(eid, "summary_only and include_summary together")

        elif op == "remove":
            if "removed" not in ex:
                err(eid, "remove needs removed")
            else:
                check_seq_list(eid, "removed", ex["removed"])

        elif op == "configure":
            s = ex.get("settings")
            if not isinstance(s, dict) or not s:
                err(eid, "configure needs settings")
                continue
            for k, v in s.items():
                if k not in SETTINGS:
                    err(eid, f"unknown setting {k!r}")
                elif not isinstance(v, SETTINGS[k]) or isinstance(v, bool):
                    err(eid, f"setting {k} has the wrong type")
                elif k == "eviction_policy" and v not in POLICIES:
                    err(eid, f"eviction_policy {v!r}")
                elif k != "eviction_policy" and v <= 0:
                    err(eid, f"setting {k} must be positive")

        elif op == "mark":
            imp = ex.get("important")
            if not isinstance(imp, dict) or not imp:
                err(eid, "mark needs important")
                continue
            for k, v in imp.items():
                if not k.isdigit() or int(k) not in FIXTURE_SEQS:
                    err(eid, f"important refers to seq {k!r} outside 1..8")
                if not isinstance(v, bool):
                    err(eid, "important values must be booleans")

    # shares
    n = len(entries)
    if n < MIN_ENTRIES:
        errors.append(f"only {n} entries, need at least {MIN_ENTRIES}")
    voices = collections.Counter(e.get("voice") for e in entries)
    for v, target in VOICES.items():
        share = voices[v] / n if n else 0
        if abs(share - target) > SHARE_TOLERANCE:
            errors.append(f"voice {v}: share {share:.1%}, target {target:.0%} ± {SHARE_TOLERANCE:.0%}")
    known = {e.get("id") for e in entries}
    if TYPO_IDS - known:
        errors.append(f"typo ids not in the data: {sorted(TYPO_IDS - known)}")
    if len(TYPO_IDS) / n > MAX_TYPO_SHARE:
        errors.append(f"typo share {len(TYPO_IDS) / n:.1%} over {MAX_TYPO_SHARE:.0%}")
    pm = [e for e in entries if e.get("voice") == "product-manager"]
    pm_typos = sum(1 for e in pm if e.get("id") in TYPO_IDS)
    if pm and pm_typos / len(pm) > MAX_TYPO_SHARE:
        errors.append(f"product-manager typo share {pm_typos / len(pm):.1%} over {MAX_TYPO_SHARE:.0%}")

    ops = collections.Counter(e["expect"].get("operation", "error") for e in entries if "expect" in e)
    per_voice = collections.defaultdict(collections.Counter)
    for e in entries:
        per_voice[e.get("voice")][e["expect"].get("operation", "error")] += 1
    print(f"{n} entries")
    print("operations: " + ", ".join(f"{k} {v} ({v / n:.1%})" for k, v in ops.most_common()))
    print("voices:     " + ", ".join(f"{k} {v} ({v / n:.1%})" for k, v in voices.most_common()))
    for v in VOICES:
        print(f"  {v}: " + ", ".join(f"{k} {c}" for k, c in per_voice[v].most_common()))
    topic = sum(1 for e in entries if "must_include" in e["expect"])
    print(f"topic searches {topic}; typos {len(TYPO_IDS)} ({len(TYPO_IDS) / n:.1%}), "
          f"product-manager typos {pm_typos}/{len(pm)}")

    if errors:
        print(f"\nFAILED: {len(errors)} problem(s)")
        for m in errors:
            print("  " + m)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
