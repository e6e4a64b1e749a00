// Drives the DLQ web page in headless Debian chromium with playwright-core
// and prints what it saw as one JSON object. dlq/browser_test.go starts
// the page's server (a kretry DLQ with dead-lettered and hostile records)
// and checks the result and the records' fate in Kafka.
//
//   node page.test.mjs URL TOKEN
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [url, token] = process.argv.slice(2);
const dataDir = mkdtempSync(join(tmpdir(), "kretry-chromium-"));
const ctx = await chromium.launchPersistentContext(dataDir, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const out = {};
try {
  const page = ctx.pages()[0] || await ctx.newPage();
  page.setDefaultTimeout(20000);
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  const rows = () => page.locator("#rows tr").count();

  // A wrong token: the API answers 401, the page says so and shows nothing.
  await page.fill("#token", "wrong-token-for-the-test");
  await page.click("#connect");
  await page.waitForFunction(() => document.getElementById("error").textContent !== "");
  out.badToken = await page.textContent("#error");
  out.rowsWithBadToken = await rows();

  // The right token: every waiting record.
  await page.fill("#token", token);
  await page.click("#connect");
  await page.waitForFunction(() => document.querySelectorAll("#rows tr").length > 0);
  out.waitingRows = await rows();

  // Filter: permanent failures only.
  await page.selectOption("#f-class", "permanent");
  await page.click("#apply");
  await page.waitForFunction(() => [...document.querySelectorAll("#rows tr td:nth-child(5)")].every((td) => td.textContent === "permanent"));
  out.permanentRows = await rows();

  // The hostile record: shown as text, its header never runs as HTML.
  await page.selectOption("#f-class", "unreadable");
  await page.click("#apply");
  await page.waitForFunction(() => [...document.querySelectorAll("#rows tr td:nth-child(5)")].every((td) => td.textContent === "unreadable"));
  out.unreadableRows = await rows();
  await page.locator("#rows tr button.show").first().click();
  await page.waitForFunction(() => document.getElementById("detail-body").textContent.includes("headers:"));
  out.forgedDetail = await page.textContent("#detail-body");
  out.xssRan = await page.evaluate(() => window.__xss !== undefined);

  // Redrive two permanent records, watching the progress.
  await page.selectOption("#f-class", "permanent");
  await page.click("#apply");
  await page.waitForFunction(() => [...document.querySelectorAll("#rows tr td:nth-child(5)")].every((td) => td.textContent === "permanent"));
  const picks = page.locator("#rows input.pick");
  out.picked = [await picks.nth(0).getAttribute("value"), await picks.nth(1).getAttribute("value")];
  await picks.nth(0).check();
  await picks.nth(1).check();
  await page.fill("#rate", "20");
  await page.click("#redrive-selected");
  await page.waitForFunction(() => / (done|stopped|failed): /.test(document.getElementById("status").textContent));
  out.status = await page.textContent("#status");
  out.progress = await page.textContent("#progress-text");

  // They are listed as redriven now.
  await page.selectOption("#f-state", "redriven");
  await page.selectOption("#f-class", "");
  await page.click("#apply");
  await page.waitForFunction(() => [...document.querySelectorAll("#rows tr td.state")].every((td) => td.textContent === "redriven"));
  out.redrivenRows = await page.locator("#rows tr").evaluateAll((trs) => trs.map((tr) => tr.dataset.record));

  // Discard the forged record with a reason.
  await page.selectOption("#f-state", "waiting");
  await page.selectOption("#f-class", "unreadable");
  await page.click("#apply");
  await page.waitForFunction(() => [...document.querySelectorAll("#rows tr td:nth-child(5)")].every((td) => td.textContent === "unreadable"));
  await page.locator("#rows input.pick").first().check();
  await page.fill("#reason", "forged by the browser test");
  await page.click("#discard-selected");
  await page.waitForFunction(() => /discarded done: /.test(document.getElementById("status").textContent));
  out.discardStatus = await page.textContent("#status");
  // The detail pane still shows the forged record (from "Show" above): it
  // is refreshed to its new state.
  await page.waitForFunction(() => document.getElementById("detail-title").textContent.includes("(discarded)"), null, { timeout: 5000 }).catch(() => {});
  out.detailAfterDiscard = await page.textContent("#detail-title");

  // A slow redrive of every waiting permanent record, cancelled after its
  // first move: it stops cleanly with the count so far.
  await page.selectOption("#f-class", "permanent");
  await page.click("#apply");
  await page.waitForFunction(() => [...document.querySelectorAll("#rows tr td:nth-child(5)")].every((td) => td.textContent === "permanent"));
  await page.fill("#rate", "0.5");
  await page.click("#redrive-filtered");
  await page.waitForFunction(() => /^1\/3(\s|$)/.test(document.getElementById("progress-text").textContent)); // no rate yet after the first move
  await page.click("#cancel");
  await page.waitForFunction(() => / (done|stopped|failed): /.test(document.getElementById("status").textContent + document.getElementById("error").textContent));
  out.cancelError = await page.textContent("#error");
  out.cancelStatus = await page.textContent("#status");
  out.pageErrors = errors;
} finally {
  await ctx.close();
  rmSync(dataDir, { recursive: true, force: true });
}
console.log(JSON.stringify(out));
