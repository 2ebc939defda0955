"""What a preview could not check: one finding for every rule that read a value known only in
`pulumi up`. The pack runs its stack rule after every other rule (`__init__.py`)."""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, StackValidationArgs

from .registry import Deferred, Report, stack_rule, take_deferred

SUMMARY = "checks-wait-for-up"
SHOWN = 3  # resources named per property before "and N more"


@stack_rule(
    SUMMARY,
    "Checks a preview cannot make (their values are unknown until earlier steps run) are "
    "made by `pulumi up`",
    EnforcementLevel.ADVISORY,
)
def checks_wait_for_up(args: StackValidationArgs, report: Report) -> None:
    """Some inputs exist only once earlier commands ran: a planned reboot's drain command
    carries the verdict of that node's reboot check. A preview cannot run the rules that read
    them; `pulumi up` runs every rule on the resource before creating it, when it is known,
    and a mandatory finding then stops the update before that step. Said once, so a reviewer
    sees which checks are left to the update and why, instead of one line per rule and
    resource."""
    deferred = take_deferred()
    if not deferred:
        return
    names = {r.urn: r.name for r in args.resources}
    report(summary(deferred, names))


def summary(deferred: list[Deferred], names: dict[str, str]) -> str:
    by_path: dict[str, set[str]] = {}
    for d in deferred:
        by_path.setdefault(d.path, set()).add(names.get(d.urn or "", "the stack"))
    rules = sorted({d.rule for d in deferred})
    parts = []
    for path, resources in sorted(by_path.items()):
        shown = sorted(resources)
        more = f", and {len(shown) - SHOWN} more" if len(shown) > SHOWN else ""
        parts.append(f"`{path}` of {len(shown)} resource{'s' if len(shown) != 1 else ''} "
                     f"({', '.join(shown[:SHOWN])}{more})")
    return (f"{len(set(deferred))} checks by {len(rules)} rules wait for `pulumi up` (the "
            f"values they read are unknown until earlier steps run): {'; '.join(parts)}. "
            f"Rules: {', '.join(rules)}")
