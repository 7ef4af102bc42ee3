"""Panel widgets with the one behaviour the views need that Panel's own lack."""

from __future__ import annotations

import panel as pn


class Choice(pn.widgets.Select):
    """A ``Select`` that drops a browser choice its options no longer hold and shows the page's value again.

    The page changes a select's options (another profile, a typed capacity) while a choice made in the
    browser from the old ones is on its way; Panel's ``Select`` then raised ``ValueError: ... not in list``
    in its callback (seen choosing a comparison as the profile switched)."""

    def _process_property_change(self, msg: dict) -> dict:
        value = msg.get("value")
        if value is not None and value != "" and value not in self.labels and value not in self.unicode_values:
            msg = {k: v for k, v in msg.items() if k != "value"}
            self.param.trigger("value")  # the browser shows a value the page does not: send the page's
        return super()._process_property_change(msg)
