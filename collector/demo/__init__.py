"""`make demo`: the one-machine demo and the simulated PDU it polls."""
