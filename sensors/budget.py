"""The org's daily API budget, as sensors see it: hold back while it is nearly spent."""

from resources.salesforce import SalesforceResource


def budget_hold_back(salesforce: SalesforceResource, reserve: float) -> str | None:
    """Why to hold back (the budget's unused share is below `reserve`, from `Sforce-Limit-Info`), or None."""
    usage = salesforce.api_usage()
    used, limit = usage.get("used", 0), usage.get("limit", 0)
    if limit and limit - used < reserve * limit:
        return f"holding back: org API budget nearly spent ({used}/{limit} requests used, reserve {reserve:.0%})"
    return None
