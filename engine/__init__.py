"""ucudnn-explorer engine: micro-batched cuDNN convolutions under workspace budgets.

CPU-only modules (networks, profiles, optimizers, plans, memory planner) import no GPU library;
``engine.gpu`` imports CuPy and the cuDNN frontend lazily, on first use.
"""

__version__ = "0.1.0"
