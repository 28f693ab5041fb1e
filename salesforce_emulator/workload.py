"""Workload generator: builds a realistic org, then changes it the way users and integrations do.

    wl = Workload(emulator, seed=1)          # straight into the store (fast); or Workload(sf_client) for REST
    wl.build_org(accounts=1000)              # accounts with contacts, opportunities, cases; plus leads
    wl.run(changes=20_000)                   # the change mix below, as fast as possible (or rate=changes/s)

The mix (weights in ``MIX``): few-field updates, nulling, address edits, creates, deletes, undeletes, purges
(recycle bin emptied: no event), the same update on several records in one transaction, mixed transactions,
lead conversions (a Lead update plus Account, Contact and Opportunity creates in one transaction) and large
transactions. Records are picked with a recency bias (recently created or touched records change more often),
but old records are picked too. Every choice comes from one seeded ``random.Random``: same seed, same workload.

In an org with person accounts (``person_accounts=None``, the default, asks the org; ``False`` makes none) a share (``PERSON_ACCOUNT_SHARE``) of new accounts are person accounts
(``IsPersonAccount``, name parts, ``PersonEmail``; their Name is the org's), and an update of a person account
changes its own fields (``data.PERSON_UPDATABLE``), its name parts too: a rename, whose new Name no event carries. Contacts carry a ``time`` field (``Best_Time_To_Call__c``).

With ``long_text=True`` records get long multi-line Descriptions and the mix gains ``edit_text`` (weight
``LONG_TEXT_WEIGHT``): small edits of a Description, which CDC sends as diffs when ``FaultConfig.diff_over_chars``
is set. Off by default, so existing seeds make the same workload.

With ``custom_objects=N`` the org's generated custom objects ``Thing_001__c`` .. ``Thing_<N>__c`` (the emulator's
``Emulator(custom_objects=N)``; ``custom_objects.py``) take part: ``build_org`` gives each ``custom_records``
records (lookups to Accounts and lower-numbered Things), and the mix's updates, nullings, creates, deletes and
large transactions pick them too (each with weight ``CUSTOM_OBJECT_WEIGHT``). ``touch_each`` changes one record of
each named object, one transaction each: a burst touching every object. Off by default.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections import Counter, deque
from typing import Any

from salesforce_emulator import custom_objects as custom
from salesforce_emulator import workload_data as data
from salesforce_emulator.errors import ApiError
from salesforce_emulator.schema import SObject, get_object, register_custom_objects
from salesforce_emulator.workload_backends import Backend, Op, Ref, RestBackend, StoreBackend

log = logging.getLogger(__name__)

OBJECTS = ("Account", "Contact", "Opportunity", "Lead", "Case")
MIX = {
    "update": 40,
    "nulling": 8,
    "address": 12,
    "create": 10,
    "delete": 5,
    "undelete": 3,
    "purge": 1,
    "multi_update": 7,
    "mixed": 6,
    "convert_lead": 4,
    "large": 0.5,
}
OBJECT_WEIGHTS = {"Account": 3, "Contact": 4, "Opportunity": 3, "Lead": 2, "Case": 3}
LONG_TEXT_WEIGHT = 30
CUSTOM_OBJECT_WEIGHT = 0.2
PERSON_ACCOUNT_SHARE = 0.3


class Workload:
    def __init__(
        self,
        target: Any,
        seed: int = 0,
        large_transaction: tuple[int, int] = (100, 400),
        long_text: bool = False,
        person_accounts: bool | None = None,
        custom_objects: int = 0,
        custom_records: int = 3,
    ):
        from salesforce_emulator.emulator import Emulator
        from salesforce_emulator.store import Store

        if isinstance(target, Emulator):
            self.backend: Backend = StoreBackend(target.store)
        elif isinstance(target, Store):
            self.backend = StoreBackend(target)
        else:
            self.backend = RestBackend(target)
        self.rng = random.Random(seed)
        self.large_transaction = large_transaction
        self.long_text = long_text
        self.person_accounts = self.backend.person_accounts() if person_accounts is None else person_accounts
        self.live: dict[str, list[str]] = {}
        self.deleted: dict[str, list[str]] = {}
        self.custom = register_custom_objects(custom_objects)
        self.custom_records = custom_records
        self.objects: tuple[str, ...] = OBJECTS + tuple(o.name for o in self.custom)
        self.weights = OBJECT_WEIGHTS | {o.name: CUSTOM_OBJECT_WEIGHT for o in self.custom}
        self.updatable: dict[str, dict[str, data.Gen]] = data.UPDATABLE | {
            o.name: self._generators(o) for o in self.custom
        }
        self.nullable: dict[str, list[str]] = data.NULLABLE | {o.name: custom.nullable(o) for o in self.custom}
        self.recent: dict[str, deque[str]] = {name: deque(maxlen=100) for name in self.objects}
        self.live_ids: dict[str, set[str]] = {}
        self.converted: set[str] = set()
        self.stats: Counter[str] = Counter()
        self._refs = 0
        self.refresh()

    def refresh(self) -> None:
        """Re-read which records exist (after changes made by someone else)."""
        for name in self.objects:
            self.live[name], self.deleted[name] = self.backend.live_and_deleted(name)
            self.live_ids[name] = set(self.live[name])

    # -- building the org ---------------------------------------------------------------------------
    def build_org(
        self,
        accounts: int = 100,
        contacts_per_account: int = 3,
        opportunities_per_account: int = 2,
        cases_per_account: int = 1,
        leads: int | None = None,
        batch: int = 200,
    ) -> dict[str, int]:
        """Create ``accounts`` accounts, their children and ``leads`` leads (default: one per two accounts), in
        transactions of ``batch`` records (as a data loader would)."""
        created: Counter[str] = Counter()
        for start in range(0, accounts, batch):
            account_ops = [self._create("Account") for _ in range(min(batch, accounts - start))]
            ids = self._apply(account_ops, count=False)
            account_ids = [ids[op.ref] for op in account_ops if op.ref]
            created["Account"] += len(account_ids)
            children = [
                self._create(name, {"AccountId": account_id})
                for account_id in account_ids
                for name, per in (
                    ("Contact", contacts_per_account),
                    ("Opportunity", opportunities_per_account),
                    ("Case", cases_per_account),
                )
                for _ in range(per)
            ]
            for chunk in range(0, len(children), batch):
                ops = children[chunk : chunk + batch]
                self._apply(ops, count=False)
                created.update(op.object for op in ops)
        lead_count = accounts // 2 if leads is None else leads
        for start in range(0, lead_count, batch):
            ops = [self._create("Lead") for _ in range(min(batch, lead_count - start))]
            self._apply(ops, count=False)
            created["Lead"] += len(ops)
        for obj in self.custom:  # in number order: a lookup's target Thing has its records already
            ops = [self._create(obj.name) for _ in range(self.custom_records)]
            for chunk in range(0, len(ops), batch):
                self._apply(ops[chunk : chunk + batch], count=False)
            created[obj.name] += len(ops)
        log.info("workload built an org: %s", dict(created))
        return dict(created)

    # -- changing it --------------------------------------------------------------------------------
    def run(self, changes: int = 1000, rate: float | None = None) -> dict[str, int]:
        """Make ``changes`` transactions from the mix; ``rate`` limits them to that many per second."""
        mix = MIX | ({"edit_text": LONG_TEXT_WEIGHT} if self.long_text else {})
        kinds, weights = list(mix), list(mix.values())
        started = time.monotonic()
        for number in range(changes):
            if rate:
                delay = started + number / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            kind = self.rng.choices(kinds, weights)[0]
            ops = getattr(self, f"_plan_{kind}")()
            if not ops:
                self.stats["skipped"] += 1
                continue
            try:
                self._apply(ops)
                self.stats[kind] += 1
            except (ApiError, RuntimeError) as exc:
                log.warning("workload %s transaction failed: %s", kind, exc)
                self.stats["failed"] += 1
                self.refresh()
        return dict(self.stats)

    def touch_each(self, names: list[str] | None = None) -> int:
        """One transaction per object of `names` (default: every object the workload changes), each updating one
        of its records: a burst that touches every object. Returns the transactions made."""
        made = 0
        for name in names or self.objects:
            if ops := self._update(name):
                self._apply(ops)
                made += 1
        return made

    def large(self, object_name: str | None = None) -> dict[str, str]:
        """One large transaction now (updates of `large_transaction` consecutive records of `object_name`, by
        default an object drawn from the mix)."""
        return self._apply(self._plan_large(object_name))

    # -- planning -----------------------------------------------------------------------------------
    def _object(self, choices: tuple[str, ...] | None = None) -> str:
        choices = choices or self.objects
        return self.rng.choices(choices, [self.weights[c] for c in choices])[0]

    def _generators(self, obj: SObject) -> dict[str, data.Gen]:
        """Value generators of a custom object's updatable fields (a lookup picks a live record of its target)."""
        gens: dict[str, data.Gen] = {
            f.name: functools.partial(custom.field_value, fld=f, targets=self.live) for f in custom.custom_fields(obj)
        }
        return gens | {"Name": lambda r: f"{obj.name[:-3]} renamed {r.randrange(10**6)}"}

    def _pick(self, name: str) -> str | None:
        """A live record: 35% recently touched, 35% among the newest tenth, 30% uniformly (old ones too)."""
        live = self.live[name]
        if not live:
            return None
        roll = self.rng.random()
        if roll < 0.35 and self.recent[name]:
            candidate = self.rng.choice(self.recent[name])
            if candidate in self.live_ids[name]:
                return candidate
        if roll < 0.70:
            return live[-1 - int(self.rng.random() * max(1, len(live) // 10))]
        return self.rng.choice(live)

    def _fields(self, name: str, count: int) -> dict[str, Any]:
        pool = self.updatable[name]
        chosen = self.rng.sample(list(pool), k=min(count, len(pool)))
        return {field: pool[field](self.rng) for field in chosen}

    def _create(self, name: str, extra: dict[str, Any] | None = None) -> Op:
        self._refs += 1
        if name == "Account" and self.person_accounts and self.rng.random() < PERSON_ACCOUNT_SHARE:
            fields = data.person_account(self.rng) | (extra or {})
        elif (obj := get_object(name)) is not None and obj.custom:  # a generated custom object
            fields = custom.new_record(self.rng, obj, self.live) | (extra or {})
        else:
            fields = data.new_record(self.rng, name, extra)
        if self.long_text and name in data.LONG_TEXT_OBJECTS:
            fields["Description"] = data.long_text(self.rng)
        return Op("create", name, fields=fields, ref=f"r{self._refs}")

    def _update(self, name: str) -> list[Op]:
        record_id = self._pick(name)
        if record_id is None:
            return []
        if name == "Account" and self.person_accounts and self.backend.value(name, record_id, "IsPersonAccount"):
            pool = data.PERSON_UPDATABLE
            chosen = self.rng.sample(list(pool), k=self.rng.randint(1, 3))
            return [Op("update", name, record_id, {field: pool[field](self.rng) for field in chosen})]
        return [Op("update", name, record_id, self._fields(name, self.rng.randint(1, 3)))]

    def _plan_update(self) -> list[Op]:
        return self._update(self._object())

    def _plan_edit_text(self) -> list[Op]:
        name = self._object(data.LONG_TEXT_OBJECTS)
        record_id = self._pick(name)
        if record_id is None:
            return []
        old = self.backend.value(name, record_id, "Description")
        new = data.edit_long_text(self.rng, old) if old and len(old) > 200 else data.long_text(self.rng)
        return [Op("update", name, record_id, {"Description": new})]

    def _plan_nulling(self) -> list[Op]:
        name = self._object()
        record_id = self._pick(name)
        if record_id is None:
            return []
        fields = self.rng.sample(self.nullable[name], k=self.rng.randint(1, 2))
        return [Op("update", name, record_id, dict.fromkeys(fields))]

    def _plan_address(self) -> list[Op]:
        name = self._object(("Account", "Contact", "Lead"))
        record_id = self._pick(name)
        if record_id is None:
            return []
        full = data.address(self.rng, self.rng.choice(data.ADDRESS_PREFIXES[name]))
        keys = self.rng.sample(list(full), k=self.rng.choice([1, 1, 2, 3, len(full)]))
        return [Op("update", name, record_id, {k: full[k] for k in keys})]

    def _plan_create(self) -> list[Op]:
        name = self._object()
        parent = {}
        if name in ("Contact", "Opportunity", "Case") and self.live["Account"]:
            parent = {"AccountId": self._pick("Account")}
        return [self._create(name, parent)]

    def _plan_delete(self) -> list[Op]:
        name = self._object()
        record_id = self._pick(name)
        return [Op("delete", name, record_id)] if record_id else []

    def _plan_undelete(self) -> list[Op]:
        name = self._object()
        bin_ = self.deleted[name]
        return [Op("undelete", name, self.rng.choice(bin_))] if bin_ else []

    def _plan_purge(self) -> list[Op]:
        name = self._object()
        bin_ = self.deleted[name]
        return [Op("purge", name, bin_[0])] if bin_ else []

    def _plan_multi_update(self) -> list[Op]:
        name = self._object()
        values = self._fields(name, self.rng.randint(1, 2))
        ids = {self._pick(name) for _ in range(self.rng.randint(2, 20))} - {None}
        return [Op("update", name, record_id, dict(values)) for record_id in sorted(ids)]  # type: ignore[arg-type]

    def _plan_mixed(self) -> list[Op]:
        ops: list[Op] = []
        for _ in range(self.rng.randint(2, 6)):
            ops.extend(self._update(self._object()))
        seen: set[str | None] = set()
        return [op for op in ops if not (op.record_id in seen or seen.add(op.record_id))]

    def _plan_convert_lead(self) -> list[Op]:
        candidates = [lead for lead in self.live["Lead"][-500:] if lead not in self.converted]
        if not candidates:
            return []
        lead = self.rng.choice(candidates)
        account = self._create("Account")
        contact = self._create("Contact", {"AccountId": Ref(str(account.ref))})
        opportunity = self._create("Opportunity", {"AccountId": Ref(str(account.ref))})
        convert = Op(
            "update",
            "Lead",
            lead,
            {
                "IsConverted": True,
                "Status": "Closed - Converted",
                "ConvertedDate": "2025-11-22",
                "ConvertedAccountId": Ref(str(account.ref)),
                "ConvertedContactId": Ref(str(contact.ref)),
                "ConvertedOpportunityId": Ref(str(opportunity.ref)),
            },
        )
        return [account, contact, opportunity, convert]

    def _plan_large(self, object_name: str | None = None) -> list[Op]:
        name = object_name or self._object()
        live = self.live[name]
        size = min(len(live), self.rng.randint(*self.large_transaction))
        start = self.rng.randrange(max(1, len(live) - size + 1))
        return [Op("update", name, record_id, self._fields(name, 1)) for record_id in live[start : start + size]]

    # -- applying -----------------------------------------------------------------------------------
    def _apply(self, ops: list[Op], count: bool = True) -> dict[str, str]:
        created = self.backend.execute(ops)
        for op in ops:
            if op.kind == "create" and op.ref in created:
                record_id = created[op.ref]
                self.live[op.object].append(record_id)
                self.live_ids[op.object].add(record_id)
                self.recent[op.object].append(record_id)
            elif op.kind == "update" and op.record_id:
                self.recent[op.object].append(op.record_id)
                if op.object == "Lead" and (op.fields or {}).get("IsConverted"):
                    self.converted.add(op.record_id)
            elif op.kind == "delete" and op.record_id:
                self.live[op.object].remove(op.record_id)
                self.live_ids[op.object].discard(op.record_id)
                self.deleted[op.object].append(op.record_id)
            elif op.kind == "undelete" and op.record_id:
                self.deleted[op.object].remove(op.record_id)
                self.live[op.object].append(op.record_id)
                self.live[op.object].sort()
                self.live_ids[op.object].add(op.record_id)
            elif op.kind == "purge" and op.record_id:
                self.deleted[op.object].remove(op.record_id)
        if count:
            self.stats["transactions"] += 1
            self.stats["record_changes"] += len(ops)
        return created
