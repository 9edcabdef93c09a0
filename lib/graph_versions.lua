-- Graph API versions and the last day each works (Meta's changelog, 2026-11).
-- A version stops two years after its successor ships; the newest has no
-- end date until the next one comes out (nil here). Add each new version
-- when Meta releases it, and the end date of the one before.
return {
  ["v20.0"] = "2026-09-24",
  ["v21.0"] = "2027-01-21",
  ["v22.0"] = "2027-05-20",
  ["v23.0"] = "2027-10-08",
  ["v24.0"] = "2028-02-18",
  ["v25.0"] = "2028-07-29",
  ["v26.0"] = false, -- current: released 2026-07-29, end not announced
}
