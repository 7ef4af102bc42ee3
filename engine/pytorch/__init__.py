"""PyTorch side: import an ``nn.Module`` as a Network, and run its convolutions with a plan.

``torch`` is imported only inside these modules' functions' callers, never by ``engine`` itself,
so the CPU paths and CI work without it.
"""
