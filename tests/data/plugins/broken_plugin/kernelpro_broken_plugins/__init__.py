NOT_A_TOOL = {"name": "looks like a tool"}
