"""Where job processes run. The Launcher interface hides it; LocalLauncher runs them here."""
