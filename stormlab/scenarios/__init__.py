"""Game days: the scenario language (scenario, reader, schema), its runner and autopilot, the labs
it runs on, scoring, the report and debrief, and the what-if replay (`stormlab scenario`,
`stormlab replay`)."""
