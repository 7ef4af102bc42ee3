"""A veil over the views from the moment a slow control is changed in the browser until the page has answered.

Placed in the views' column (dashboard/ui.py), it covers that column only, in a served page and in a notebook.

The server handles a choice on the page's one event loop (dashboard/threads.py) and can send nothing before it has
finished: a first switch to a large profile or engine set takes it 2-3 s, during which the cards showed the
earlier numbers as if current. So the browser veils the views itself, on the user's own input to a control marked
``SLOW`` (a select's ``input``, a click on a button not already active, Enter in a text box, a file chosen or
dropped, and again once its chunks have all been sent; never a value the server sets), and then asks the server
(``asked``, sent after the control's own change, so the server reads it after handling that change); the server
echoes it in ``done`` and the veil lifts once the latest question is answered. The echo makes no assumption about
what the server received: a choice the browser did not send (the value the server already had) or Panel dropped is
answered all the same.
"""

from __future__ import annotations

import panel as pn
import param

SLOW = "ucudnn-slow"  # CSS class of the controls whose change may take the server seconds
ASK_AFTER_MS = 150  # after the control's own message (Bokeh sends it on the same input, Panel debounces 50 ms)
TIMEOUT_MS = 120_000  # a veil whose answer never comes (a dead server) lifts after this


class BusyVeil(pn.custom.JSComponent):
    asked = param.Integer(default=0, doc="The browser's latest question: set after a SLOW control's change")
    done = param.Integer(default=0, doc="The server's answer: ``asked`` echoed once everything before it ran")

    _esm = f"""
export function render({{ model, el }}) {{
  const veil = document.createElement('div')
  veil.className = 'veil'
  veil.setAttribute('data-testid', 'busy')
  veil.innerHTML = '<span>Updating...</span>'
  el.appendChild(veil)
  let asked = model.asked, timer = null
  const hide = () => {{ veil.classList.remove('on'); clearTimeout(timer) }}
  const show = () => {{
    veil.classList.add('on')
    const n = ++asked
    setTimeout(() => {{ model.asked = n }}, {ASK_AFTER_MS})
    clearTimeout(timer)
    timer = setTimeout(hide, {TIMEOUT_MS})
  }}
  const slow = (e) => e.composedPath().some((n) => n.classList && n.classList.contains('{SLOW}'))
  const onInput = (e) => {{
    const t = e.composedPath()[0]
    if ((t.tagName === 'SELECT' || t.type === 'file') && slow(e)) show()
  }}
  const onClick = (e) => {{
    const button = e.composedPath().find((n) => n.tagName === 'BUTTON')
    if (button && !button.classList.contains('bk-active') && slow(e)) show()
  }}
  const onKey = (e) => {{ if (e.key === 'Enter' && e.composedPath()[0].tagName === 'INPUT' && slow(e)) show() }}
  // a file chosen or dropped veils at once; FilePond's event once the uploader has handed every chunk to the
  // websocket (on its own animation-frame loop, so late under load) asks again, after them
  const onFile = (e) => {{ if (slow(e)) show() }}
  document.addEventListener('input', onInput, true)
  document.addEventListener('click', onClick, true)
  document.addEventListener('keydown', onKey, true)
  document.addEventListener('FilePond:processfile', onFile, true)
  document.addEventListener('drop', onFile, true)
  model.on('done', () => {{ if (model.done >= asked) hide() }})
  model.on('remove', () => {{
    hide()
    document.removeEventListener('input', onInput, true)
    document.removeEventListener('click', onClick, true)
    document.removeEventListener('keydown', onKey, true)
    document.removeEventListener('FilePond:processfile', onFile, true)
    document.removeEventListener('drop', onFile, true)
  }})
}}
"""

    _stylesheets = [
        """
.veil { display: none; }
.veil.on {
  display: flex; position: absolute; top: 0; bottom: 0; right: 0; left: 0; z-index: 1000;
  justify-content: center; align-items: flex-start;
  background: rgba(255, 255, 255, 0.55); cursor: progress;
}
.veil span {
  position: sticky; top: 120px; margin-top: 120px;
  background: #1f4e79; color: white; padding: 8px 16px; border-radius: 4px; font-size: 1.1em;
}
"""
    ]

    def __init__(self, **params):
        # static, so that the veil (absolute) covers the layout the component is placed in, not its 0 x 0 self
        super().__init__(height=0, width=0, margin=0, styles={"position": "static"}, **params)

    def answer(self, event) -> None:
        """The browser's question, read after the changes it sent before it: answer it."""
        self.done = event.new
