#!/usr/bin/env python3
"""Validate understanding_a.jsonl (blind set A). Exit 1 on any problem.

Run: python3 tests/corpus/blind/check_understanding_a.py
"""
import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "understanding_a.jsonl"

# Entries whose query deliberately contains a typo (hurried-human voice only).
TYPO_IDS = {"a-051", "a-103", "a-104", "a-145"}

VOICES = {  # voice -> (min share, max share); brief: ~40% / ~30% / ~30%
    "llm-orchestrator": (0.35, 0.45),
    "developer": (0.25, 0.35),
    "hurried-human": (0.25, 0.35),
}
OPS = {"store", "retrieve", "remove", "summarize", "configure", "mark", "stats"}
OP_SHARE = {  # rough shares from the brief
    "store": (0.25, 0.35), "retrieve": (0.30, 0.40), "remove": (0.15, 0.25),
    "summarize": (0.07, 0.13),
}
EXPECT_KEYS = {"operation", "stored", "seqs", "must_include", "must_exclude", "removed",
               "settings", "important", "include_summary", "summary_only", "error"}
TOP_KEYS = {"id", "voice", "query", "metadata", "data", "expect"}
META_KEYS = {"conversation_id", "speaker", "turn_number"}
SPEAKERS = {"user", "assistant", "system"}
SETTINGS = {"buffer_size", "max_tokens", "eviction_batch", "summary_token_limit", "eviction_policy"}
FIXTURE_SEQS = set(range(1, 9))

errors = []


def err(eid, msg):
    errors.append(f"{eid}: {msg}")


def seq_list(eid, name, v, ascending=True):
    if not isinstance(v, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in v):
        err(eid, f"{name} must be a list of ints")
        return
    bad = [s for s in v if s not in FIXTURE_SEQS]
    if bad:
        err(eid, f"{name} has seqs outside 1..8: {bad}")
    if ascending and v != sorted(set(v)):
        err(eid, f"{name} must be strictly ascending: {v}")


entries = []
for n, line in enumerate(DATA.read_text(encoding="utf-8").splitlines(), 1):
    if not line.strip():
        err(f"line {n}", "blank line")
        continue
    try:
        entries.append(json.loads(line))
    except json.JSONDecodeError as exc:
        err(f"line {n}", f"invalid JSON: {exc}")

ids = Counter(e.get("id") for e in entries)
for i, c in ids.items():
    if c > 1:
        err(i, f"duplicate id ({c}x)")
    if not isinstance(i, str) or not re.fullmatch(r"a-\d{3}", i):
        err(i, "id must look like a-001")

for e in entries:
    eid = e.get("id")
    extra = set(e) - TOP_KEYS
    if extra:
        err(eid, f"unknown top-level keys {extra}")
    if e.get("voice") not in VOICES:
        err(eid, f"bad voice {e.get('voice')!r}")
    q = e.get("query")
    if not isinstance(q, str) or not q.strip():
        err(eid, "query must be a non-empty string")
        q = ""
    md = e.get("metadata", {})
    if set(md) - META_KEYS:
        err(eid, f"metadata keys not allowed: {set(md) - META_KEYS}")
    if "speaker" in md and md["speaker"] not in SPEAKERS:
        err(eid, f"metadata.speaker invalid: {md['speaker']}")
    if "turn_number" in md and (not isinstance(md["turn_number"], int) or md["turn_number"] < 0):
        err(eid, "metadata.turn_number must be a whole number >= 0")
    data = e.get("data", {})
    if not isinstance(data, dict):
        err(eid, "data must be an object")
        data = {}
    if "operation" in data:
        err(eid, "data.operation is not allowed")

    x = e.get("expect")
    if not isinstance(x, dict):
        err(eid, "expect missing")
        continue
    if set(x) - EXPECT_KEYS:
        err(eid, f"unknown expect keys {set(x) - EXPECT_KEYS}")
    op = x.get("operation")
    if "error" in x:
        if x["error"] != "INVALID_ARGUMENT":
            err(eid, f"error must be INVALID_ARGUMENT, got {x['error']}")
        if set(x) - {"error", "operation"}:
            err(eid, "an error entry carries no other expectations")
    else:
        if op not in OPS:
            err(eid, f"bad or missing operation {op!r}")

    if op == "store":
        s = x.get("stored")
        if not isinstance(s, dict) or "text" not in s or "speaker" not in s:
            err(eid, "store needs stored.text and stored.speaker")
        else:
            t = s["text"]
            if not t or t != t.strip() or t[0] in "\"'" or t[-1] in "\"'":
                err(eid, f"stored.text has stray whitespace/quotes: {t!r}")
            if t not in q and t not in str(data.get("text", "")):
                err(eid, f"stored.text not verbatim in query or data.text: {t!r}")
            if t == q:
                err(eid, "stored.text is the whole query (no instruction?)")
            if s["speaker"] not in SPEAKERS:
                err(eid, f"stored.speaker invalid: {s['speaker']}")
            if "speaker" in md and md["speaker"] != s["speaker"]:
                err(eid, "stored.speaker disagrees with metadata.speaker")
            if "turn_number" in s:
                if not isinstance(s["turn_number"], int) or s["turn_number"] < 0:
                    err(eid, "stored.turn_number must be a whole number")
                if "turn_number" in md and md["turn_number"] != s["turn_number"]:
                    err(eid, "stored.turn_number disagrees with metadata.turn_number")
            if set(s) - {"text", "speaker", "turn_number"}:
                err(eid, f"unknown stored keys {set(s) - {'text', 'speaker', 'turn_number'}}")
    elif "stored" in x:
        err(eid, "stored only for store")

    if op == "retrieve":
        topic = "must_include" in x
        if topic == ("seqs" in x):
            err(eid, "retrieve needs exactly one of seqs (non-topic) / must_include (topic)")
        if "seqs" in x:
            seq_list(eid, "seqs", x["seqs"])
            if x.get("summary_only") and x["seqs"]:
                err(eid, "summary_only retrieve returns no utterances")
        if topic:
            seq_list(eid, "must_include", x["must_include"])
            if not x["must_include"]:
                err(eid, "must_include empty")
            if "must_exclude" in x:
                seq_list(eid, "must_exclude", x["must_exclude"])
                if set(x["must_include"]) & set(x["must_exclude"]):
                    err(eid, "must_include and must_exclude overlap")
        if x.get("include_summary") and x.get("summary_only"):
            err(eid, "include_summary and summary_only are exclusive")
    else:
        for k in ("seqs", "must_include", "must_exclude", "include_summary", "summary_only"):
            if k in x:
                err(eid, f"{k} only for retrieve")

    if op == "remove":
        if "removed" not in x:
            err(eid, "remove needs removed")
        else:
            seq_list(eid, "removed", x["removed"])
            if not x["removed"]:
                err(eid, "removed is empty")
    elif "removed" in x:
        err(eid, "removed only for remove")

    if op == "configure":
        st = x.get("settings")
        if not isinstance(st, dict) or not st:
            err(eid, "configure needs settings")
        else:
            for k, v in st.items():
                if k not in SETTINGS:
                    err(eid, f"unknown setting {k}")
                elif k == "eviction_policy":
                    if v not in ("fifo", "importance"):
                        err(eid, f"eviction_policy must be fifo/importance, got {v}")
                elif not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                    err(eid, f"{k} must be a positive int")
    elif "settings" in x:
        err(eid, "settings only for configure")

    if op == "mark":
        im = x.get("important")
        if not isinstance(im, dict) or not im:
            err(eid, "mark needs important")
        else:
            for k, v in im.items():
                if not k.isdigit() or int(k) not in FIXTURE_SEQS:
                    err(eid, f"important key {k!r} not a seq 1..8")
                if not isinstance(v, bool):
                    err(eid, "important values must be booleans")
    elif "important" in x:
        err(eid, "important only for mark")

# ---- shares ----
N = len(entries)
if N < 160:
    err("set", f"only {N} entries, need >= 160")
vc = Counter(e.get("voice") for e in entries)
for v, (lo, hi) in VOICES.items():
    share = vc[v] / N if N else 0
    if not lo <= share <= hi:
        err("set", f"voice {v} share {share:.1%} outside {lo:.0%}..{hi:.0%}")

oc = Counter(e["expect"].get("operation", "error") for e in entries)
oc_all = Counter(oc)
oc_all["remove"] += oc_all.pop("error", 0)  # refusals are all ambiguous removes in this set
for o, (lo, hi) in OP_SHARE.items():
    share = oc_all[o] / N if N else 0
    if not lo <= share <= hi:
        err("set", f"operation {o} share {share:.1%} outside {lo:.0%}..{hi:.0%}")
for o in OPS:
    if oc_all[o] == 0:
        err("set", f"operation {o} not covered")
n_err = sum(1 for e in entries if "error" in e["expect"])
if not 6 <= n_err <= 10:
    err("set", f"{n_err} refusal entries, want about 8")

known = {e.get("id") for e in entries}
for t in TYPO_IDS:
    if t not in known:
        err(t, "TYPO_IDS names an id that does not exist")
typo_entries = [e for e in entries if e.get("id") in TYPO_IDS]
for e in typo_entries:
    if e["voice"] != "hurried-human":
        err(e["id"], "typos belong to the hurried-human voice only")
if N and len(typo_entries) / N > 0.10:
    err("set", f"typo share {len(typo_entries) / N:.1%} > 10%")
if vc["hurried-human"] and len(typo_entries) / vc["hurried-human"] > 0.10:
    err("set", f"hurried-human typo share {len(typo_entries) / vc['hurried-human']:.1%} > 10%")

print(f"{N} entries")
print("voices:", dict(vc))
print("operations:", dict(oc))
print(f"refusals: {n_err}, typos: {len(typo_entries)}")
by = Counter((e["voice"], e["expect"].get("operation", "error")) for e in entries)
for v in VOICES:
    print(f"  {v}: " + ", ".join(f"{o}={by[(v, o)]}" for o in sorted(OPS | {'error'}) if by[(v, o)]))
if errors:
    print(f"\n{len(errors)} problem(s):")
    for m in errors:
        print("  " + m)
    sys.exit(1)
print("OK")
