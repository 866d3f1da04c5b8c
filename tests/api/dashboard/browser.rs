//! The dashboard in a real Chromium (through chromedriver): added in the next step.
