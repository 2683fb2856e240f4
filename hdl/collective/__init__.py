"""RTL of the collective engine (section 15.8): its adder, its apply unit, the engine, and the
collective simulation top that puts one at every accelerator of an RDMA fabric."""
