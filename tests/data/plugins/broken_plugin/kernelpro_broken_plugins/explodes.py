raise RuntimeError("this plugin is broken on purpose")
