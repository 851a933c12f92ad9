"""Hand-written conversations for bench/bench_retention.py, with their facts marked.

Four kinds of conversation, each a sequence of episodes written by hand:
planning trips, a coding session (versions, file names, error codes, pull
requests), support cases (ticket numbers, e-mail addresses, refunds,
decisions), and home-renovation quotes (contractors, amounts, measurements,
materials, permits; written after the summarizer was tuned on the other
three, to see whether what was tuned there holds elsewhere). Every episode corrects one fact it stated earlier, as people do.
Each episode's slots are filled from hand-written value lists, so a long
conversation talks about many trips, bugs and tickets instead of repeating
one.

A fact is written ``{like this}`` in the text: names, numbers, dates, codes
and decisions. ``{~like this}`` marks a value a later utterance corrects; it
is stored but not counted as a fact to keep (a summary may rightly drop it).
``utterances`` returns the plain text and the facts of each utterance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SCENARIOS", "Said", "utterances"]

_FACT = re.compile(r"\{(~?)([^{}]+)\}")
_ARTICLE = re.compile(r"^(?:the|a|an) ")


@dataclass(frozen=True)
class Said:
    """One utterance of a benchmark conversation and the facts it states."""

    speaker: str
    text: str
    facts: tuple[str, ...]


_TRAVEL = [
    ("user", "I'm planning a trip to {{{city}}} with {{{friend}}} from {{{d1}}} to {{{d2}}}."),
    ("assistant", "Nice! Would you rather take the train or fly to {{{city}}}?"),
    ("user", "Train if it takes under {{{hours} hours}}, otherwise we fly from {{{airport}}}."),
    (
        "assistant",
        "The fastest train needs {{{train} hours}}, so flying is better: flight {{{flight}}} "
        "leaves {{{airport}}} at {{{dep}}}.",
    ),
    (
        "user",
        "Book flight {{{flight}}} for both of us. Our budget is {{~{budget1} euros}} in total.",
    ),
    ("assistant", "Done, the booking reference is {{{pnr}}}."),
    ("user", "For the hotel, {{{friend}}} would like to stay near {{{landmark}}}."),
    (
        "assistant",
        "{{{hotel}}} is a short walk from {{{landmark}}} and costs {{{rate} euros}} a night.",
    ),
    ("user", "Sounds good, please reserve it for {{{nights} nights}}."),
    ("assistant", "Reserved. The hotel comes to {{{total} euros}} with breakfast."),
    (
        "user",
        "Actually, raise the budget to {{{budget2} euros}}, {{{friend}}} wants to see {{{sight}}} too.",
    ),
    (
        "assistant",
        "Updated: the budget is now {{{budget2} euros}}. Tickets for {{{sight}}} cost "
        "{{{ticket} euros}} each.",
    ),
    ("user", "Thanks, that's great."),
    ("assistant", "You're welcome! Anything else for the trip?"),
    ("user", "Remember that {{{friend}}} is vegetarian and allergic to {{{allergen}}}."),
    ("assistant", "I'll keep it in mind. {{{restaurant}}} near the hotel has a vegetarian menu."),
]

_CODING = [
    ("user", "CI fails on Python {{{py}}} but passes on {{{py_old}}}, any idea?"),
    ("assistant", "Could you paste the error message?"),
    ("user", "{{{error}}} in {{{file}}} at line {{{line}}}: {{{message}}}."),
    (
        "assistant",
        "That comes from {{{package} {pkgver}}}, which changed the signature of "
        "{{{function}}} in that release.",
    ),
    ("user", "Should we pin {{{package}}} to {{{pkgold}}} then?"),
    (
        "assistant",
        "Pinning to {{{pkgold}}} works, but it is better to update the calls to "
        "{{{function}}} in {{{file}}}.",
    ),
    ("user", "OK, I'll update the calls. The pull request is {{#{pr}}}."),
    (
        "assistant",
        "I looked at {{#{pr}}}: the fix in {{{file}}} is right, but {{{test}}} still uses "
        "the old API.",
    ),
    ("user", "Fixed {{{test}}} as well. Now the linter exits with code {{{exit}}}."),
    (
        "assistant",
        "Exit code {{{exit}}} means {{{linter}}} found {{{warnings} warnings}}; run it with "
        "--fix first.",
    ),
    ("user", "Done. We decided to drop Python {{{py_drop}}} in release {{~{release_old}}}."),
    (
        "assistant",
        "Then set requires-python to {{>={py_min}}} in pyproject.toml and say so in CHANGELOG.md.",
    ),
    ("user", "Correction: that release is {{{release}}}, not {release_old}."),
    ("assistant", "Got it, {{{release}}}. Tag it once the {{{branch}}} branch is merged."),
    ("user", "Thanks, that's all for now."),
    ("assistant", "Good luck with the release!"),
]

_SUPPORT = [
    ("user", "Hello, this is {{{name}}} from {{{company}}}. Ticket {{{ticket}}} is still open."),
    (
        "assistant",
        "Hi {{{name}}}. Ticket {{{ticket}}} is about {{{issue}}} and was opened on {{{opened}}}.",
    ),
    ("user", "Yes. Since {{{since}}} our invoices say {{{wrong}}} instead of {{{right}}}."),
    ("assistant", "I see it: account {{{account}}} was moved to the {{{plan}}} plan by mistake."),
    ("user", "Please move us back to {{{plan_old}}} and refund the difference."),
    (
        "assistant",
        "Account {{{account}}} is back on {{{plan_old}}}. A refund of {{{refund}}} arrives "
        "within {{{days} business days}}.",
    ),
    ("user", "Send the confirmation to {{~{email_old}}}, please."),
    ("assistant", "Sure. Should I copy anyone else?"),
    ("user", "Sorry, not that one: use {{{email}}} instead, {email_old} is no longer read."),
    (
        "assistant",
        "Done, the confirmation goes to {{{email}}}. I escalated the billing error to "
        "{{{agent}}} as case {{{case}}}.",
    ),
    ("user", "When will {{{agent}}} get back to us?"),
    ("assistant", "{{{agent}}} works until {{{until}}}; expect an answer by {{{by}}}."),
    ("user", "OK. We agreed that any future plan change needs approval from {{{approver}}}."),
    ("assistant", "Noted on the account: plan changes require approval from {{{approver}}}."),
    ("user", "Thanks for the help."),
    (
        "assistant",
        "You're welcome, {{{name}}}. I'll close ticket {{{ticket}}} once the refund posts.",
    ),
]

_RENOVATION = [
    (
        "user",
        "The quote from {{{builder}}} for the {{{room}}} came in today: {{{quote}}} all in, "
        "reference {{{ref}}}.",
    ),
    ("assistant", "Does that include the {{{finish}}} and taking out the old {{{old}}}?"),
    ("user", "The price covers the {{{finish}}}; removing the {{{old}}} is another {{{removal}}}."),
    (
        "assistant",
        "{{{rival}}} quoted {{{rival_quote}}} for the same work and needs {{{rival_weeks} weeks}}.",
    ),
    ("user", "{{{builder}}} can start on {{{start}}} and expects {{{days} working days}}."),
    (
        "assistant",
        "So {{{builder}}} is both cheaper and quicker. Should I ask them for proof of insurance?",
    ),
    ("user", "Yes please, and ask whether {{{foreman}}} will be on site every day."),
    (
        "assistant",
        "{{{foreman}}} replied from {{{email}}}: insurance policy {{{policy}}}, and he will be "
        "there daily except {{{offday}}}.",
    ),
    ("user", "I measured the {{{room}}} as {{~{dims_old}}} for the flooring."),
    ("assistant", "Which flooring did you settle on?"),
    (
        "user",
        "Sorry, I misread the tape: it is {{{dims}}}, not {dims_old}. We picked {{{floor}}} from "
        "{{{supplier}}}.",
    ),
    (
        "assistant",
        "Then you need {{{area} square metres}} with waste, at {{{price}}} per square metre from "
        "{{{supplier}}}.",
    ),
    (
        "user",
        "We agreed to pay a deposit of {{{deposit}}} and the rest when the job is signed off.",
    ),
    (
        "assistant",
        "Noted. Building control application {{{permit}}} covers the {{{structural}}}; "
        "the inspector visits on {{{inspection}}}.",
    ),
    ("user", "Perfect, thank you."),
    ("assistant", "You're welcome. I'll remind you of the {{{inspection}}} visit the day before."),
]

_CITIES = [
    "Lisbon",
    "Porto",
    "Kyoto",
    "Vienna",
    "Marrakesh",
    "Reykjavik",
    "Seville",
    "Krakow",
    "Tallinn",
    "Bologna",
    "Ljubljana",
    "Valencia",
    "Edinburgh",
    "Bergen",
    "Split",
    "Ghent",
]
_FRIENDS = [
    "Maya",
    "Tobias",
    "Ingrid",
    "Rafael",
    "Noor",
    "Kenji",
    "Aoife",
    "Lucas",
    "Priya",
    "Mateo",
    "Sigrid",
    "Omar",
    "Clara",
    "Dmitri",
    "Zanele",
    "Hugo",
]
_AIRPORTS = ["Frankfurt", "Schiphol", "Heathrow", "Zurich", "Munich", "Brussels", "Copenhagen"]
_LANDMARKS = [
    "the old cathedral",
    "the riverside market",
    "the castle hill",
    "the central station",
    "the harbour",
    "the botanical garden",
    "the opera house",
    "the university library",
]
_HOTELS = [
    "Hotel Aurora",
    "Casa Verde",
    "The Linden Inn",
    "Pension Mira",
    "Hotel Solstice",
    "The Copper Kettle",
    "Villa Rosa",
    "Hotel Nordlys",
    "The Alder House",
]
_SIGHTS = [
    "the modern art museum",
    "the aquarium",
    "the royal palace",
    "the tile museum",
    "the observatory",
    "the cable car",
    "the old synagogue",
    "the puppet theatre",
]
_ALLERGENS = ["peanuts", "sesame", "shellfish", "walnuts", "celery", "mustard"]
_RESTAURANTS = [
    "Folha",
    "Green Table",
    "Maison Lune",
    "Tavola",
    "Seed & Sprout",
    "Kombu",
    "The Orchard",
    "Lentil Lane",
]
_MONTHS = ["March", "April", "May", "June", "September", "October"]

_PYTHONS = ["3.11.6", "3.12.1", "3.12.3", "3.13.0", "3.11.9", "3.12.7"]
_ERRORS = ["TypeError", "KeyError", "AttributeError", "ValueError", "ImportError", "RecursionError"]
_FILES = [
    "src/billing/invoice.py",
    "app/models/order.py",
    "lib/parser/lexer.py",
    "services/auth/tokens.py",
    "src/export/csv_writer.py",
    "pkg/cache/lru.py",
    "app/api/routes.py",
    "src/reports/pdf.py",
]
_MESSAGES = [
    "unexpected keyword argument 'tz'",
    "'customer_id'",
    "'NoneType' object has no attribute 'split'",
    "invalid literal for int() with base 10",
    "cannot import name 'Mapping'",
    "maximum recursion depth exceeded",
]
_PACKAGES = [
    ("pydantic", "2.7.0", "1.10.15", "parse_obj"),
    ("sqlalchemy", "2.0.30", "1.4.52", "execute"),
    ("requests", "2.32.0", "2.31.0", "Session.send"),
    ("numpy", "2.0.1", "1.26.4", "asarray"),
    ("pandas", "2.2.2", "2.1.4", "read_csv"),
    ("attrs", "24.1.0", "23.2.0", "evolve"),
]
_TESTS = [
    "tests/test_invoice.py",
    "tests/test_orders.py",
    "tests/test_lexer.py",
    "tests/test_tokens.py",
    "tests/test_export.py",
    "tests/test_cache.py",
]
_LINTERS = ["ruff", "flake8", "mypy", "pylint"]
_BRANCHES = ["release-prep", "fix-ci", "py313-support", "drop-legacy", "hotfix-billing"]

_NAMES = [
    "Helena Brandt",
    "Samuel Okafor",
    "Yuki Tanaka",
    "Marta Nowak",
    "Javier Ruiz",
    "Aisha Rahman",
    "Pieter de Vries",
    "Chloe Martin",
    "Ravi Iyer",
    "Elin Johansson",
]
_COMPANIES = [
    "Northwind Ltd",
    "Bluefin Logistics",
    "Quarry Labs",
    "Hearth & Co",
    "Polar Freight",
    "Atlas Dental",
    "Kestrel Media",
    "Orchid Foods",
]
_ISSUES = [
    "double billing",
    "a missing credit note",
    "a wrong VAT rate",
    "a failed card payment",
    "an unapplied discount",
    "duplicate seats",
]
_PLANS = [
    ("Enterprise", "Business"),
    ("Business", "Team"),
    ("Premium", "Standard"),
    ("Team", "Starter"),
]
_AGENTS = ["Grace Liu", "Tom Becker", "Fatou Diallo", "Ivan Petrov", "Sara Costa", "Ben Carter"]
_APPROVERS = [
    "the CFO",
    "Lena from finance",
    "the procurement team",
    "Marco in legal",
    "the IT director",
]
_BUILDERS = [
    "Hartley Builders",
    "Kowalski & Sons",
    "Brightwater Renovations",
    "Oakline Joinery",
    "Mendes Construction",
    "Fenwick Brothers",
    "Ashgrove Interiors",
    "Calder & Finch",
]
_ROOMS = ["kitchen", "bathroom", "loft", "utility room", "dining room", "basement", "conservatory"]
_FINISHES = [
    "quartz worktops",
    "walk-in shower",
    "dormer window",
    "stacked laundry cupboard",
    "sliding doors",
    "damp-proof membrane",
    "roof glazing",
]
_OLD = [
    "units",
    "bathtub",
    "water tank",
    "boiler",
    "serving hatch",
    "coal bunker",
    "polycarbonate roof",
]
_FOREMEN = [
    "Declan Moore",
    "Piotr Kowalski",
    "Gareth Evans",
    "Nuno Mendes",
    "Rhys Fenwick",
    "Callum Reid",
    "Tomasz Wrobel",
]
_FLOORS = [
    "engineered oak",
    "porcelain tiles",
    "luxury vinyl planks",
    "solid walnut",
    "herringbone parquet",
    "polished concrete",
    "cork tiles",
]
_SUPPLIERS = ["Floorcraft", "Tile Depot", "Harlow Timber", "StoneHaus", "Woodpecker Floors"]
_STRUCTURAL = [
    "new steel beam",
    "knocked-through wall",
    "widened doorway",
    "raised ceiling joists",
    "removed chimney breast",
]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
_LATE_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
]


def _travel(k: int) -> dict[str, str]:
    city = _CITIES[k % len(_CITIES)]
    month = _MONTHS[k % len(_MONTHS)]
    day = 3 + (k * 5) % 20
    nights = 2 + k % 5
    rate = 95 + (k * 17) % 120
    return {
        "city": city,
        "friend": _FRIENDS[(k * 7) % len(_FRIENDS)],
        "d1": f"{month} {day}",
        "d2": f"{month} {day + nights}",
        "hours": str(4 + k % 3),
        "train": str(7 + k % 5),
        "airport": _AIRPORTS[k % len(_AIRPORTS)],
        "flight": f"{'LTKLXOBAIB'[2 * (k % 5) : 2 * (k % 5) + 2]}{1200 + k * 37 % 800}",
        "dep": f"{6 + k % 12}:{(k * 25) % 60:02d}",
        "budget1": f"{1200 + 100 * (k % 9)}",
        "budget2": f"{1700 + 150 * (k % 7)}",
        "pnr": "".join(
            "ABCDEFGHJKLMNPQRSTUVWXYZ"[(k * m + 7 * m + k // m) % 24] for m in (3, 5, 7, 11, 13, 17)
        ),
        "landmark": _LANDMARKS[k % len(_LANDMARKS)],
        "hotel": _HOTELS[(k * 5) % len(_HOTELS)],
        "rate": str(rate),
        "nights": str(nights),
        "total": str(rate * nights + 18 * nights),
        "sight": _SIGHTS[(k * 3) % len(_SIGHTS)],
        "ticket": str(12 + k % 15),
        "allergen": _ALLERGENS[k % len(_ALLERGENS)],
        "restaurant": _RESTAURANTS[(k * 3) % len(_RESTAURANTS)],
    }


def _coding(k: int) -> dict[str, str]:
    package, version, old, function = _PACKAGES[k % len(_PACKAGES)]
    py = _PYTHONS[k % len(_PYTHONS)]
    minor = int(py.split(".")[1])
    return {
        "py": py,
        "py_old": f"3.{minor - 1}.{(k * 3) % 12}",
        "error": _ERRORS[k % len(_ERRORS)],
        "file": _FILES[(k * 3) % len(_FILES)],
        "line": str(40 + (k * 53) % 400),
        "message": _MESSAGES[k % len(_MESSAGES)],
        "package": package,
        "pkgver": version,
        "pkgold": old,
        "function": function,
        "pr": str(4100 + k * 13),
        "test": _TESTS[k % len(_TESTS)],
        "exit": str(1 + k % 4),
        "linter": _LINTERS[k % len(_LINTERS)],
        "warnings": str(3 + (k * 7) % 40),
        "py_drop": f"3.{8 + k % 2}",
        "py_min": f"3.{10 + k % 2}",
        "release_old": f"v{2 + k // 10}.{k % 10}.0",
        "release": f"v{2 + k // 10}.{k % 10}.1",
        "branch": _BRANCHES[k % len(_BRANCHES)],
    }


def _support(k: int) -> dict[str, str]:
    name = _NAMES[k % len(_NAMES)]
    plan, plan_old = _PLANS[k % len(_PLANS)]
    first, last = name.lower().split(" ", 1)
    domain = _COMPANIES[(k * 3) % len(_COMPANIES)].split()[0].lower()
    return {
        "name": name,
        "company": _COMPANIES[(k * 3) % len(_COMPANIES)],
        "ticket": f"TCK-{48213 + k * 97}",
        "issue": _ISSUES[k % len(_ISSUES)],
        "opened": f"2024-0{1 + k % 9}-{10 + k % 18}",
        "since": f"{_MONTHS[k % len(_MONTHS)]} {1 + k % 27}",
        "wrong": f"€{2400 + 35 * k}",
        "right": f"€{1900 + 35 * k}",
        "account": f"ACC-{70000 + k * 311}",
        "plan": plan,
        "plan_old": plan_old,
        "refund": f"€{500 + k % 7 * 10}",
        "days": str(3 + k % 5),
        "email_old": f"{first[0]}.{last.replace(' ', '')}@{domain}.com",
        "email": f"billing-{first}@{domain}.com",
        "agent": _AGENTS[k % len(_AGENTS)],
        "case": f"ESC-{9100 + k * 7}",
        "until": f"{16 + k % 4}:00 CET",
        "by": f"{['Monday', 'Tuesday', 'Wednesday', 'Thursday'][k % 4]} noon",
        "approver": _APPROVERS[k % len(_APPROVERS)],
    }


def _renovation(k: int) -> dict[str, str]:
    builder = _BUILDERS[k % len(_BUILDERS)]
    month = _LATE_MONTHS[k % len(_LATE_MONTHS)]
    length, width = 3.1 + (k * 0.3) % 2.5, 2.4 + (k * 0.7) % 1.9
    first = _FOREMEN[k % len(_FOREMEN)].split()[0].lower()
    domain = builder.split()[0].lower()
    return {
        "builder": builder,
        "rival": _BUILDERS[(k + 3) % len(_BUILDERS)],
        "room": _ROOMS[k % len(_ROOMS)],
        "quote": f"£{8400 + k * 265:,}",
        "ref": f"Q-{2291 + k * 17}",
        "finish": _FINISHES[k % len(_FINISHES)],
        "old": _OLD[k % len(_OLD)],
        "removal": f"£{350 + (k * 45) % 400}",
        "rival_quote": f"£{9100 + k * 310:,}",
        "rival_weeks": str(5 + k % 4),
        "start": f"{4 + (k * 3) % 24} {month}",
        "days": str(12 + (k * 5) % 15),
        "foreman": _FOREMEN[k % len(_FOREMEN)],
        "email": f"{first}@{domain}.co.uk",
        "policy": f"PL-{448120 + k * 733}",
        "offday": _DAYS[k % len(_DAYS)] + "s",
        "dims_old": f"{length + 0.5:.1f} by {width:.1f} metres",
        "dims": f"{length:.1f} by {width:.1f} metres",
        "floor": _FLOORS[k % len(_FLOORS)],
        "supplier": _SUPPLIERS[(k * 2) % len(_SUPPLIERS)],
        "area": f"{length * width * 1.1:.1f}",
        "price": f"£{28 + (k * 7) % 60}",
        "deposit": f"£{1000 + 250 * (k % 6):,}",
        "permit": f"BC/{2024 + k % 2}/{173 + k * 29:04d}",
        "structural": _STRUCTURAL[k % len(_STRUCTURAL)],
        "inspection": f"{_DAYS[(k + 2) % len(_DAYS)]} {1 + (k * 11) % 27} {_LATE_MONTHS[(k + 1) % 11]}",
    }


SCENARIOS = {
    "travel": (_TRAVEL, _travel),
    "coding": (_CODING, _coding),
    "support": (_SUPPORT, _support),
    "renovation": (_RENOVATION, _renovation),
}


def utterances(scenario: str, count: int) -> list[Said]:
    """The first ``count`` utterances of a scenario, episode after episode."""
    template, values = SCENARIOS[scenario]
    out: list[Said] = []
    episode = 0
    while len(out) < count:
        slots = values(episode)
        for speaker, line in template:
            marked = line.format(**slots)
            # "the old cathedral" is the fact "old cathedral": an article is not what is remembered.
            facts = tuple(
                _ARTICLE.sub("", m.group(2)) for m in _FACT.finditer(marked) if not m.group(1)
            )
            text = _FACT.sub(lambda m: m.group(2), marked)
            out.append(Said(speaker, text, facts))
            if len(out) == count:
                break
        episode += 1
    return out
