// dashboard.mjs - loads the coordinator's dashboard in headless Chromium
// (Debian's, driven by playwright-core) against a live job and checks what
// it renders against the coordinator's own snapshot.
//
// usage: node dashboard.mjs URL SNAPSHOT.json SCREENSHOT.png WORKERS [RECOVERY [PRECOPY.json]]
//   waits until the page shows WORKERS members, then checks the member
//   count, the members table and the shard map (every shard of replica 0 as
//   a rectangle with its table and rank) against SNAPSHOT.json, and, given
//   RECOVERY (may be empty), that the header's recovery line holds that
//   text; saves a screenshot. Given PRECOPY.json (a pre-copy's `migration`
//   message as the stream sent it), then hands the page that message for
//   the generation after its own, as while the next world's rows are
//   copied, and checks that it draws the progress as a pre-copy, then an
//   `aborted` message, and checks that the progress is gone. Exits
//   non-zero, saying why, when anything differs.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
const require = createRequire(new URL("../../tools/", import.meta.url));
const { chromium } = require("playwright-core");

const [url, snapPath, shot, workers, recovery, precopyPath] = process.argv.slice(2);
const fail = (why) => { console.error("dashboard: " + why); process.exitCode = 1; };

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction((n) => document.body.dataset.ready === "1" &&
    document.getElementById("member-count").textContent === n, workers, { timeout: 30000 });
  const seen = await page.evaluate(() => ({
    count: document.getElementById("member-count").textContent,
    phase: document.getElementById("phase").textContent,
    recovery: document.getElementById("recovery").textContent,
    members: [...document.querySelectorAll("#members tbody tr")].map((tr) => ({
      name: tr.dataset.member, rank: tr.cells[1].textContent })),
    shards: [...document.querySelectorAll("#shard-map rect.shard")].map((r) => `${r.dataset.table}@${r.dataset.rank}`),
    bars: document.querySelectorAll("#shard-map rect.shard").length,
  }));
  await page.screenshot({ path: shot, fullPage: true });
  // what the coordinator says, fetched through rowshiftctl right after the page settled
  const snap = JSON.parse(readFileSync(snapPath, "utf8"));
  if (seen.count !== String(snap.world)) fail(`member count ${seen.count}, snapshot ${snap.world}`);
  const ranked = snap.members.filter((m) => m.rank !== null).map((m) => `${m.name}:${m.rank}`).sort();
  const shown = seen.members.filter((m) => m.rank !== "-").map((m) => `${m.name}:${m.rank}`).sort();
  if (JSON.stringify(ranked) !== JSON.stringify(shown)) fail(`members ${shown} vs ${ranked}`);
  const want = snap.plan.tables.flatMap((t) => t.shards.filter((s) => (s.replica ?? 0) === 0).map((s) => `${t.name}@${s.rank}`)).sort();
  if (JSON.stringify(seen.shards.sort()) !== JSON.stringify(want))
    fail(`shard map has ${seen.shards.length} rectangles ${seen.shards.slice(0, 6)}..., the plan ${want.length}`);
  const ranksDrawn = new Set(seen.shards.map((s) => s.split("@")[1]));
  if (ranksDrawn.size !== snap.world) fail(`the map shows ${ranksDrawn.size} ranks, the world has ${snap.world}`);
  if (recovery && !seen.recovery.includes(recovery)) fail(`the recovery line is '${seen.recovery}', wanted '${recovery}'`);
  if (!recovery && seen.recovery) fail(`a recovery line with no recovery: '${seen.recovery}'`);
  if (precopyPath) {
    const msg = JSON.parse(readFileSync(precopyPath, "utf8"));
    const drawn = await page.evaluate((m) => {
      const shown = () => getComputedStyle(document.getElementById("migration")).display !== "none";
      m.generation = state.snap.generation + 1;
      apply(m);
      const during = { on: shown(), text: document.getElementById("migration-text").textContent };
      apply({ type: "aborted", generation: m.generation, reason: "called off", kept: state.snap.generation });
      return { ...during, after: shown() };
    }, msg);
    const want = `pre-copying while training`, members = `${msg.precopied} of ${msg.members} members done`;
    if (!drawn.on || !drawn.text.includes(want) || !drawn.text.includes(members))
      fail(`a pre-copy's progress: shown ${drawn.on}, '${drawn.text}', wanted '${want}' and '${members}'`);
    if (drawn.after) fail("the pre-copy's progress is still shown after the attempt was aborted");
  }
  if (errors.length) fail("page errors: " + errors.join("; "));
  console.log(`dashboard: ${seen.count} members, ${seen.bars} shards on ${ranksDrawn.size} ranks, phase ${seen.phase}; screenshot ${shot}`);
} finally {
  await browser.close();
}
