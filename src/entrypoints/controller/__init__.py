"""``ljrk controller``: the node controller that enables and disables the node Runtime through Jobs."""
