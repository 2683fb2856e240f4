"""RTL of the collective engine (section 15.8): its adder and its apply unit."""
