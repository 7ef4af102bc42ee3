"""WR dynamic program, desirable sets, WD integer program and the network Pareto front."""
