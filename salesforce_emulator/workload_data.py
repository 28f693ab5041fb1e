"""Plausible field values for the workload generator, per object (seeded ``random.Random`` only)."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from typing import Any

FIRST = [
    "Ada",
    "Grace",
    "Alan",
    "Edsger",
    "Barbara",
    "Ken",
    "Margaret",
    "Linus",
    "Donald",
    "Frances",
    "John",
    "Radia",
    "Tim",
    "Katherine",
    "Dennis",
    "Hedy",
    "Niklaus",
    "Shafi",
    "Leslie",
    "Sophie",
]
LAST = [
    "Lovelace",
    "Hopper",
    "Turing",
    "Dijkstra",
    "Liskov",
    "Thompson",
    "Hamilton",
    "Torvalds",
    "Knuth",
    "Allen",
    "Backus",
    "Perlman",
    "Berners-Lee",
    "Johnson",
    "Ritchie",
    "Lamarr",
    "Wirth",
    "Goldwasser",
]
COMPANY = ["Acme", "Globex", "Initech", "Umbrella", "Stark", "Wayne", "Hooli", "Vandelay", "Soylent", "Cyberdyne"]
CITIES = [
    ("Springfield", "IL", "USA"),
    ("Chicago", "IL", "USA"),
    ("Paris", None, "France"),
    ("Berlin", None, "Germany"),
    ("Austin", "TX", "USA"),
    ("Lyon", None, "France"),
    ("Boston", "MA", "USA"),
    ("Toronto", "ON", "Canada"),
    ("Sydney", "NSW", "Australia"),
    ("Osaka", None, "Japan"),
]
INDUSTRY = ["Manufacturing", "Energy", "Retail", "Banking", "Technology", "Healthcare", "Education", "Media"]
STAGES = ["Prospecting", "Qualification", "Needs Analysis", "Proposal", "Negotiation", "Closed Won", "Closed Lost"]
LEAD_STATUS = ["Open - Not Contacted", "Working - Contacted", "Closed - Not Converted"]
CASE_STATUS = ["New", "Working", "Escalated", "Closed"]


def _date(rng: random.Random) -> str:
    return (dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(900))).isoformat()


def _text(rng: random.Random, words: int = 12) -> str:
    vocabulary = [
        "renewal",
        "pricing",
        "call",
        "demo",
        "escalation",
        "contract",
        "follow-up",
        "budget",
        "signed",
        "churn",
        "risk",
        "upsell",
        "meeting",
        "invoice",
        "delivery",
        "support",
    ]
    return " ".join(rng.choice(vocabulary) for _ in range(rng.randint(3, words))).capitalize() + "."


# Pieces of the free text people type into Description fields and email bodies: commas, quotes, apostrophes,
# accents, CJK and 4-byte emoji, tabs. Line breaks are LF, CRLF (pasted from Windows) or U+2028 (pasted from a
# word processor), so every reader of Bulk CSV, REST JSON and CDC landing lines meets multi-line quoted values.
PHRASES = [
    "Customer called about the renewal, asked for a 10% discount",
    'They said "we\'ll sign by Friday"',
    "Follow-up: send the revised quote, cc legal",
    "Réunion à Paris avec l'équipe achats; très positif",
    "Zürich office wants a demo (Größe: 500 seats)",
    "東京の担当者から連絡あり。見積もりを再送すること",
    "Escalated 🚨 after the outage; root cause in the sync job 🚀",
    "Budget approved ✅, PO pending 🤞",
    'Quote: "Price, not features, is the issue"',
    "Tab\tseparated\tnotes from the call",
    "Ticket #4521 \u2014 closed",
    "Contact prefers email; phone after 5pm only",
    'Naïve question from procurement: "what is an API?"',
    "Emoji in subject line 👍🏽 and a flag 🇫🇷",
    "Line with a trailing comma,",
    '"Quoted line at the start',
]
BREAKS = ["\n", "\n", "\n", "\r\n", "\n\n", "\u2028"]


def free_text(rng: random.Random) -> str:
    """Realistic free text: a few lines to a few paragraphs (now and then a long email body of several KB)."""
    lines = rng.randint(1, 8) if rng.random() < 0.95 else rng.randint(40, 120)
    text = rng.choice(PHRASES)
    for _ in range(lines - 1):
        text += rng.choice(BREAKS) + rng.choice(PHRASES)
    return text


LONG_TEXT_OBJECTS = ("Account", "Opportunity", "Case")  # objects with a long text field (Description)
_NOTES = [
    "Kick-off call with the buying committee",
    "Renewal terms discussed; pricing sheet sent",
    "Escalation closed after the on-site visit",
    "Budget approved for next quarter",
    "Contract redlines returned by legal",
    "Déjà vu: the same invoice question again",
    "Follow-up scheduled — bring the roadmap",
    "Support backlog reviewed, 3 tickets left",
    "Upsell to premium tier 🚀 under discussion",
    "Delivery slipped by two weeks (東京 warehouse)",
]


def long_text(rng: random.Random, lines: int | None = None) -> str:
    """A long multi-line Description (1-3k characters), as account notes grow: dated lines, some unicode, and
    the line breaks of the client that wrote it (browsers send CRLF, APIs usually LF). No leading or trailing
    whitespace: Salesforce trims it."""
    count = lines or rng.randint(25, 45)
    separator = rng.choice(["\n", "\r\n"])
    return separator.join(_note_line(rng, number) for number in range(count))


def _note_line(rng: random.Random, number: int) -> str:
    return f"{_date(rng)} #{number:03d} {rng.choice(_NOTES)}. {_text(rng, 10)}"


def edit_long_text(rng: random.Random, old: str) -> str:
    """A small edit of a long text, as users make them: a line rewritten, inserted, removed or appended (so
    Salesforce would send a diff). Keeps the text's line breaks."""
    separator = "\r\n" if "\r\n" in old else "\n"
    lines = old.split(separator)
    for _ in range(rng.randint(1, 2)):
        at = rng.randrange(len(lines))
        kind = rng.choice(["rewrite", "insert", "remove", "append"])
        if kind == "rewrite":
            lines[at] = lines[at].split(". ")[0] + ". " + _text(rng, 10)
        elif kind == "insert":
            lines.insert(at, _note_line(rng, 900 + at))
        elif kind == "remove" and len(lines) > 10:
            del lines[at]
        else:
            lines.append(_note_line(rng, len(lines)))
    return separator.join(lines)


def call_time(rng: random.Random) -> str:
    """A time of day on the quarter hour, as a ``time`` field holds it (``HH:MM:SS.sssZ``)."""
    return f"{rng.randint(7, 19):02d}:{rng.choice([0, 15, 30, 45]):02d}:00.000Z"


def _phone(rng: random.Random) -> str:
    return f"+1 555 {rng.randrange(10000):04d}"


def address(rng: random.Random, prefix: str) -> dict[str, Any]:
    city, state, country = rng.choice(CITIES)
    return {
        f"{prefix}Street": f"{rng.randint(1, 999)} {rng.choice(LAST)} St",
        f"{prefix}City": city,
        f"{prefix}State": state,
        f"{prefix}PostalCode": f"{rng.randrange(100000):05d}",
        f"{prefix}Country": country,
        f"{prefix}Latitude": round(rng.uniform(-60, 60), 6),
        f"{prefix}Longitude": round(rng.uniform(-150, 150), 6),
    }


ADDRESS_PREFIXES = {"Account": ["Billing", "Shipping"], "Contact": ["Mailing"], "Lead": [""]}

Gen = Callable[[random.Random], Any]
UPDATABLE: dict[str, dict[str, Gen]] = {
    "Account": {
        "Industry": lambda r: r.choice(INDUSTRY),
        "Rating": lambda r: r.choice(["Hot", "Warm", "Cold"]),
        "Phone": _phone,
        "Website": lambda r: f"https://{r.choice(COMPANY).lower()}.example",
        "NumberOfEmployees": lambda r: r.randint(1, 50_000),
        "AnnualRevenue": lambda r: float(r.randint(1, 10**6) * 100),
        "Description": free_text,
        "Type": lambda r: r.choice(["Customer", "Partner", "Prospect"]),
    },
    "Contact": {
        "Title": lambda r: r.choice(["CEO", "CTO", "VP Sales", "Engineer", "Buyer"]),
        "Email": lambda r: f"{r.choice(FIRST).lower()}.{r.randrange(10**6)}@example.com",
        "Phone": _phone,
        "Birthdate": _date,
        "HasOptedOutOfEmail": lambda r: r.random() < 0.2,
        "FirstName": lambda r: r.choice(FIRST),
        "Best_Time_To_Call__c": call_time,
    },
    "Opportunity": {
        "StageName": lambda r: r.choice(STAGES),
        "Amount": lambda r: float(r.randint(1, 5000) * 100),
        "Probability": lambda r: float(r.choice([10, 20, 50, 75, 90, 100])),
        "CloseDate": _date,
        "Description": free_text,
        "LeadSource": lambda r: r.choice(["Web", "Phone Inquiry", "Partner Referral"]),
    },
    "Lead": {
        "Status": lambda r: r.choice(LEAD_STATUS),
        "Title": lambda r: r.choice(["Director", "Manager", "Analyst"]),
        "Email": lambda r: f"lead{r.randrange(10**6)}@example.com",
        "Phone": _phone,
        "LeadSource": lambda r: r.choice(["Web", "Trade Show", "Word of mouth"]),
    },
    "Case": {
        "Status": lambda r: r.choice(CASE_STATUS),
        "Priority": lambda r: r.choice(["High", "Medium", "Low"]),
        "Subject": lambda r: _text(r, 6),
        "Description": free_text,
        "Origin": lambda r: r.choice(["Phone", "Email", "Web"]),
    },
}
# A person account's own fields, its name parts among them: a rename changes the Name the org derives, which CDC
# does not send (the platform fetches it; see docs/emulator.md).
PERSON_UPDATABLE: dict[str, Gen] = {
    "PersonEmail": lambda r: f"{r.choice(FIRST).lower()}.{r.randrange(10**6)}@example.net",
    "PersonBirthdate": _date,
    "Phone": _phone,
    "Description": free_text,
    "Rating": lambda r: r.choice(["Hot", "Warm", "Cold"]),
    "FirstName": lambda r: r.choice(FIRST),
    "LastName": lambda r: r.choice(LAST),
    "MiddleName": lambda r: r.choice([None, "J.", "Marie"]),
    "Salutation": lambda r: r.choice(["Mr.", "Ms.", "Dr."]),
}
NULLABLE = {
    "Account": ["Industry", "Rating", "Phone", "Website", "Description", "Type", "BillingState"],
    "Contact": ["Title", "Phone", "Birthdate", "Email", "MailingCity", "Best_Time_To_Call__c"],
    "Opportunity": ["Amount", "Probability", "Description", "LeadSource"],
    "Lead": ["Title", "Phone", "Email", "City"],
    "Case": ["Priority", "Description", "Origin"],
}


def person_account(rng: random.Random) -> dict[str, Any]:
    """A person account (an Account that is a person: its Name is derived from the name parts)."""
    return {
        "IsPersonAccount": True,
        "Salutation": rng.choice(["Mr.", "Ms.", "Dr.", None]),
        "FirstName": rng.choice(FIRST),
        "MiddleName": rng.choice([None, None, "J.", "Marie"]),
        "LastName": rng.choice(LAST),
        "Suffix": rng.choice([None, None, None, "Jr."]),
        "PersonEmail": f"p{rng.randrange(10**7)}@example.net",
        "PersonBirthdate": _date(rng),
        "Phone": _phone(rng),
        **address(rng, "Billing"),
    }


def new_record(rng: random.Random, object_name: str, parent: dict[str, str] | None = None) -> dict[str, Any]:
    parent = parent or {}
    if object_name == "Account":
        return {
            "Name": f"{rng.choice(COMPANY)} {rng.randrange(10**6)}",
            "Industry": rng.choice(INDUSTRY),
            "NumberOfEmployees": rng.randint(1, 5000),
            "AnnualRevenue": float(rng.randint(1, 10**5) * 1000),
            "Phone": _phone(rng),
            **address(rng, "Billing"),
        }
    if object_name == "Contact":
        return {
            "FirstName": rng.choice(FIRST),
            "LastName": rng.choice(LAST),
            "Email": f"c{rng.randrange(10**7)}@example.com",
            "Salutation": rng.choice(["Mr.", "Ms.", "Dr.", None]),
            **address(rng, "Mailing"),
            "Best_Time_To_Call__c": rng.choice([call_time(rng), None]),
            **parent,
        }
    if object_name == "Opportunity":
        return {
            "Name": f"{rng.choice(COMPANY)} deal {rng.randrange(10**5)}",
            "StageName": rng.choice(STAGES[:4]),
            "CloseDate": _date(rng),
            "Amount": float(rng.randint(1, 5000) * 100),
            **parent,
        }
    if object_name == "Lead":
        return {
            "FirstName": rng.choice(FIRST),
            "LastName": rng.choice(LAST),
            "Company": rng.choice(COMPANY),
            "Status": "Open - Not Contacted",
            "Email": f"l{rng.randrange(10**7)}@example.com",
            **address(rng, ""),
        }
    if object_name == "Case":
        return {
            "Subject": _text(rng, 6),
            "Status": "New",
            "Priority": rng.choice(["High", "Medium", "Low"]),
            "Origin": rng.choice(["Phone", "Email", "Web"]),
            "Description": free_text(rng),
            **parent,
        }
    raise ValueError(f"the workload does not create {object_name} records")
