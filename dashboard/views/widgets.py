"""Panel widgets with the one behaviour the views need that Panel's own lack.

The page changes a control's options and value (another profile, a typed capacity) while a choice made in the
browser from the old ones is on its way. Two things then went wrong: a choice the new options no longer hold
raised in Panel's callback (``ValueError: ... not in list`` for a select, ``IndexError`` for a button group);
and a choice the new options do hold was taken, but the browser, having received the page's own change after
sending it, went on showing the page's value: a Mini-batch select showing 64 under views of B=8, for good.
So a refused choice is answered with the page's value, and an accepted one is echoed back to the browser,
which shows what the views use either way (a browser already showing it ignores the echo).
"""

from __future__ import annotations

from functools import partial

import panel as pn


def echo(widget, prop: str) -> None:
    """Send the Bokeh models' ``prop`` to the browser again: Panel sends nothing for a value the browser itself
    sent. In a served page on the next tick, under the document's lock (the change that called this may run
    without it); the value is read then, so a change the page made meanwhile is what goes."""
    for ref, (model, _parent) in list(widget._models.items()):
        doc = model.document
        if doc is not None and doc.session_context is not None:
            doc.add_next_tick_callback(partial(_resend, widget, ref, model, prop))
        else:
            _resend(widget, ref, model, prop)


def _resend(widget, ref: str, model, prop: str) -> None:
    """``_models`` (root id -> model) and ``_changing`` (root id -> properties the page is changing, whose
    change events Panel skips) are Panel's own records (private in Panel 1.9): without the mark the echo came
    back as a browser change, to be echoed again, every 50 ms."""
    value = getattr(model, prop)
    widget._changing.setdefault(ref, []).append(prop)
    model.trigger(prop, value, value)


class Choice(pn.widgets.Select):
    """A ``Select`` that drops a browser choice its options no longer hold and echoes the ones it takes."""

    def _process_property_change(self, msg: dict) -> dict:
        value = msg.get("value")
        if value is not None and value != "" and value not in self.labels and value not in self.unicode_values:
            msg = {k: v for k, v in msg.items() if k != "value"}
            self.param.trigger("value")  # the browser shows a value the page does not: send the page's
        elif "value" in msg:
            echo(self, "value")
        return super()._process_property_change(msg)


class Buttons(pn.widgets.RadioButtonGroup):
    """A ``RadioButtonGroup`` that drops a click on a button the options no longer hold (an index past them)
    and echoes the clicks it takes."""

    def _process_property_change(self, msg: dict) -> dict:
        index = msg.get("active")
        if index is not None and not 0 <= index < len(self.options):
            msg = {k: v for k, v in msg.items() if k != "active"}
            self.param.trigger("value")
        elif "active" in msg:
            echo(self, "active")
        return super()._process_property_change(msg)
