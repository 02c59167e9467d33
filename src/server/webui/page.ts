// bloomery web UI: the one HTML page of the chat and placement views; its script picks the view
// from the path. Links are relative, so the page works under any --api-prefix.
export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>bloomery</title>
<link rel="icon" href="data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E%3Crect width='16' height='16' rx='3' fill='%23b4541a'/%3E%3C/svg%3E">
<link rel="stylesheet" href="webui/style.css">
<script type="module" src="webui/app.js"></script>
</head>
<body>
<noscript>bloomery's web UI needs JavaScript; the API answers without it (docs/api.md).</noscript>
<div id="app"></div>
</body>
</html>
`;
