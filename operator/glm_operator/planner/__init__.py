"""Pure planners: from what is desired and what was observed, what to do (objects, status, events)."""
