"""Panel views: each a ``pn.viewable.Viewer`` over one shared ``PlannerState`` (panel-patterns.md §2)."""
